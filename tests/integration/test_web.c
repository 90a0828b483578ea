/*
 * Web pages: a page on any site that a person running sbxd opens in a browser may send
 * requests to sbxd (cross-site "simple" requests: a form's POST, or fetch() with a form or
 * text body and no preflight), and with DNS rebinding (its own name re-resolved to
 * 127.0.0.1) read the answers too. Each test replays what such a page sends, byte for byte
 * as a browser would, against a tokenless sbxd, and asserts it was refused with nothing done;
 * and that what curl, the agent-sandbox SDKs (directly, through the router, by Service name
 * or pod IP) and the kubelet send is still served.
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "harness.h"
#include "suites.h"

/* What a browser adds to every request of a page (Chrome's headers; a cross-site request
 * also gets Origin, and over HTTPS or to localhost the Sec-Fetch-* ones). */
#define BROWSER                                                                                    \
    "User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "          \
    "Chrome/126.0.0.0 Safari/537.36\r\n"                                                           \
    "Accept: */*\r\nAccept-Language: en-US,en;q=0.9\r\nAccept-Encoding: gzip, deflate\r\n"
#define CROSS_SITE                                                                                 \
    "Origin: http://evil.example\r\nReferer: http://evil.example/\r\n"                             \
    "Sec-Fetch-Site: cross-site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: empty\r\n"
/* What the agent-sandbox Python SDK sends (requests), through the router or directly. */
#define SDK                                                                                        \
    "User-Agent: python-requests/2.31.0\r\nAccept-Encoding: gzip, deflate\r\nAccept: */*\r\n"      \
    "X-Sandbox-ID: sbx-1234\r\nX-Sandbox-Namespace: team-a\r\nX-Sandbox-Port: 8888\r\n"

struct answer {
    int status;
    char text[16384]; /* the whole answer, head and body */
};

/* One request on a new connection: method, path, the Host header's value ("" for the
 * daemon's own 127.0.0.1:PORT), more header lines (each ending "\r\n"), a Content-Type (NULL:
 * none) and a body (NULL: none). Reads until the peer closes. */
static void ask(const struct daemon *d, const char *method, const char *path, const char *host,
                const char *headers, const char *ctype, const char *body, struct answer *a)
{
    char hostbuf[64];
    if (!*host) {
        snprintf(hostbuf, sizeof(hostbuf), "127.0.0.1:%d", d->port);
        host = hostbuf;
    }
    char req[8192];
    int n = snprintf(req, sizeof(req), "%s %s HTTP/1.1\r\nHost: %s\r\n%s", method, path, host,
                     headers ? headers : "");
    if (ctype)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "Content-Type: %s\r\n", ctype);
    if (body)
        n += snprintf(req + n, sizeof(req) - (size_t)n, "Content-Length: %zu\r\n", strlen(body));
    n +=
        snprintf(req + n, sizeof(req) - (size_t)n, "Connection: close\r\n\r\n%s", body ? body : "");
    ck_assert_int_lt(n, (int)sizeof(req));
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)d->port)};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    ck_assert(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ck_assert(send(fd, req, (size_t)n, MSG_NOSIGNAL) == n);
    size_t got = 0;
    ssize_t k;
    while (got + 1 < sizeof(a->text) &&
           (k = recv(fd, a->text + got, sizeof(a->text) - 1 - got, 0)) > 0)
        got += (size_t)k;
    a->text[got] = '\0';
    close(fd);
    a->status = 0;
    sscanf(a->text, "HTTP/1.%*d %d", &a->status);
}

static const char *body_of(const struct answer *a)
{
    const char *b = strstr(a->text, "\r\n\r\n");
    return b ? b + 4 : "";
}

static bool in_ws(const struct daemon *d, const char *name)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", d->ws, name);
    return access(p, F_OK) == 0;
}

static void put_ws(const struct daemon *d, const char *name, const char *content)
{
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s/%s", d->ws, name);
    FILE *f = fopen(p, "w");
    ck_assert_ptr_nonnull(f);
    fputs(content, f);
    fclose(f);
}

/* Mismatches are gathered, so that one run shows every route that let a page through. */
struct tally {
    char report[3000];
    size_t len;
    int bad;
};

__attribute__((format(printf, 2, 3))) static void note(struct tally *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (t->len < sizeof(t->report) - 1)
        t->len += (size_t)vsnprintf(t->report + t->len, sizeof(t->report) - t->len, fmt, ap);
    va_end(ap);
    if (t->len >= sizeof(t->report))
        t->len = sizeof(t->report) - 1;
    t->bad++;
}

/* The answer must be `want`; a 403 must be the JSON error (JSON-RPC's on /mcp). */
static void expect(struct tally *t, const char *what, const struct answer *a, int want)
{
    if (a->status != want) {
        note(t, "  %s: HTTP %d, want %d: %.160s\n", what, a->status, want, body_of(a));
        return;
    }
    if (want == 403) {
        const char *b = body_of(a);
        bool mcp = strstr(what, "/mcp") != NULL;
        if (!strstr(a->text, "application/json") ||
            !(mcp ? strstr(b, "-32600") != NULL : strstr(b, "\"PERMISSION_DENIED\"") != NULL))
            note(t, "  %s: 403 without the JSON error: %.200s\n", what, b);
    }
}

/* ------------------------------------------------------------------------------------ */
/* A page on another site posts to every route that changes something.                    */

START_TEST(cross_site_pages_change_nothing)
{
    /* A command user of its own: should a page's reset get through, it clears that user's
     * files in /tmp (a reset's reach: docs/security.md), not other daemons' workspaces. */
    char user[32];
    snprintf(user, sizeof(user), "%u:%u", 48000 + (unsigned)(getpid() % 1000),
             48000 + (unsigned)(getpid() % 1000));
    const char *args[] = {"--user", user, NULL};
    struct daemon d;
    daemon_start(&d, args, NULL);
    put_ws(&d, "canary.txt", "still here\n");
    struct answer a;
    struct tally t = {.len = 0};
    /* A background process for the signal route: started by a client, not a page. */
    ask(&d, "POST", "/processes", "", NULL, "application/json", "{\"command\":\"sleep 30\"}", &a);
    ck_assert_msg(a.status == 201, "%s", a.text);
    cJSON *p = cJSON_Parse(body_of(&a));
    char sig[128];
    snprintf(sig, sizeof(sig), "/processes/%s/signal", jstr(p, "id"));
    cJSON_Delete(p);

    static const char form[] = "application/x-www-form-urlencoded";
    static const char mp_ct[] = "multipart/form-data; boundary=----WebKitFormBoundaryx7Yq";
    static const char mp[] = "------WebKitFormBoundaryx7Yq\r\n"
                             "Content-Disposition: form-data; name=\"file\"; "
                             "filename=\"pwned-upload\"\r\n"
                             "Content-Type: text/plain\r\n\r\npwned\r\n"
                             "------WebKitFormBoundaryx7Yq--\r\n";
    const struct {
        const char *method, *path, *ctype, *body;
    } pages[] = {
        /* <form enctype=text/plain> and fetch(..., {mode: "no-cors"}) send these. */
        {"POST", "/execute", form, "{\"command\":\"touch pwned-execute\"}"},
        {"POST", "/execute", "text/plain", "{\"command\":\"touch pwned-execute\"}"},
        {"POST", "/execute", NULL, "{\"command\":\"touch pwned-execute\"}"},
        {"POST", "/processes", form, "{\"command\":\"touch pwned-process\"}"},
        {"POST", "/contexts", form, "{\"language\":\"sh\"}"},
        {"POST", "/run_code", form, "{\"language\":\"sh\",\"code\":\"touch pwned-code\"}"},
        {"POST", "/reset", form, "{}"},
        {"POST", "/upload", mp_ct, mp},
        {"POST", sig, form, "{\"signal\":\"SIGKILL\"}"},
        /* (PUT and DELETE need a preflight across sites; a rebound page sends them
         * same-origin, with an Origin all the same.) */
        {"PUT", "/files/pwned-put", "text/plain", "pwned"},
        {"DELETE", "/files/canary.txt", NULL, NULL},
        {"POST", "/mcp", "application/json",
         "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"initialize\",\"params\":{"
         "\"protocolVersion\":\"2025-06-18\",\"capabilities\":{},"
         "\"clientInfo\":{\"name\":\"page\",\"version\":\"1\"}}}"},
        {"POST", "/files/canary.txt?edit", "text/plain", "{\"old\":\"still\",\"new\":\"pwned\"}"},
        /* Reads: opaque to a page across sites, but never served to one. */
        {"GET", "/files/canary.txt", NULL, NULL},
        {"GET", "/healthz", NULL, NULL},
        {"GET", "/files/?grep=still", NULL, NULL},
        {"GET", "/files/?glob=*", NULL, NULL},
        {"GET", "/files/canary.txt?lines=1:", NULL, NULL},
        {"GET", "/usage", NULL, NULL},
    };
    for (size_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++) {
        ask(&d, pages[i].method, pages[i].path, "", BROWSER CROSS_SITE, pages[i].ctype,
            pages[i].body, &a);
        char what[256];
        snprintf(what, sizeof(what), "%s %s (%s) from http://evil.example", pages[i].method,
                 pages[i].path, pages[i].ctype ? pages[i].ctype : "no Content-Type");
        expect(&t, what, &a, 403);
    }
    /* Origin: null (a sandboxed iframe, a file:// page, a redirect) is no better. */
    ask(&d, "POST", "/execute", "", BROWSER "Origin: null\r\n", form,
        "{\"command\":\"touch pwned-execute\"}", &a);
    expect(&t, "POST /execute from Origin null", &a, 403);
    /* A page allowed by its Origin (one of this machine: a local dev server's) still posts
     * nothing a page may send without a preflight: a form, text, no type. (JSON needs
     * application/json, which across origins waits for a preflight sbxd never grants.) */
    const char *local = BROWSER "Origin: http://localhost:5173\r\n"
                                "Sec-Fetch-Site: same-site\r\nSec-Fetch-Mode: no-cors\r\n";
    char move[160];
    snprintf(move, sizeof(move), "/files/canary.txt?move_to=pwned-move");
    const struct {
        const char *path, *ctype, *body;
    } simple[] = {
        {"/execute", form, "{\"command\":\"touch pwned-execute\"}"},
        {"/execute", NULL, "{\"command\":\"touch pwned-execute\"}"},
        {"/upload", mp_ct, mp},
        {move, NULL, NULL},
        {sig, "text/plain", "{\"signal\":\"SIGKILL\"}"},
        {"/files/canary.txt?edit", "text/plain", "{\"old\":\"still\",\"new\":\"pwned\"}"},
        {"/files/canary.txt?edit", NULL, "{\"old\":\"still\",\"new\":\"pwned\"}"},
    };
    for (size_t i = 0; i < sizeof(simple) / sizeof(simple[0]); i++) {
        ask(&d, "POST", simple[i].path, "", local, simple[i].ctype, simple[i].body, &a);
        char what[256];
        snprintf(what, sizeof(what), "POST %s (%s) from http://localhost:5173", simple[i].path,
                 simple[i].ctype ? simple[i].ctype : "no Content-Type");
        expect(&t, what, &a, 403);
    }
    /* A browser without Origin (a form's POST from an older one): Sec-Fetch-Site says it. */
    ask(&d, "POST", "/processes", "", "Sec-Fetch-Mode: navigate\r\nSec-Fetch-Site: cross-site\r\n",
        form, "{\"command\":\"touch pwned-process\"}", &a);
    expect(&t, "POST /processes (form, Sec-Fetch-Site only)", &a, 403);

    /* Nothing ran, was written, started, signalled or reset. */
    static const char *const pwned[] = {"pwned-execute", "pwned-process", "pwned-code",
                                        "pwned-upload",  "pwned-put",     "pwned-move"};
    for (size_t i = 0; i < sizeof(pwned) / sizeof(pwned[0]); i++)
        if (in_ws(&d, pwned[i]))
            note(&t, "  %s exists in the workspace\n", pwned[i]);
    if (!in_ws(&d, "canary.txt"))
        note(&t, "  canary.txt is gone (reset or DELETE)\n");
    char canary[PATH_MAX], text[64] = "";
    snprintf(canary, sizeof(canary), "%s/canary.txt", d.ws);
    FILE *cf = fopen(canary, "r");
    if (cf) {
        if (!fgets(text, sizeof(text), cf))
            text[0] = '\0';
        fclose(cf);
        if (strcmp(text, "still here\n") != 0)
            note(&t, "  canary.txt was edited: %s\n", text);
    }
    ask(&d, "GET", "/processes", "", NULL, NULL, NULL, &a);
    cJSON *list = cJSON_Parse(body_of(&a));
    cJSON *procs = cJSON_GetObjectItemCaseSensitive(list, "processes");
    if (cJSON_GetArraySize(procs) != 1 ||
        strcmp(jstr(cJSON_GetArrayItem(procs, 0), "status"), "running") != 0)
        note(&t, "  processes now: %.300s\n", body_of(&a));
    cJSON_Delete(list);
    ask(&d, "GET", "/contexts", "", NULL, NULL, NULL, &a);
    if (strstr(body_of(&a), "\"id\""))
        note(&t, "  a context was made: %.300s\n", body_of(&a));
    ck_assert_msg(t.bad == 0, "a web page drove sbxd (%d):\n%s", t.bad, t.report);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* What is not a web page keeps working: curl, the SDKs, the router, the kubelet.         */

START_TEST(curl_sdk_router_and_probes_are_served)
{
    const struct daemon *d = &g_sbxd;
    struct answer a;
    struct tally t = {.len = 0};
    char what[256];
    /* The README's one-liner: curl -d '{...}' localhost:8888/execute (curl's form type). */
    const char *curl = "User-Agent: curl/8.5.0\r\nAccept: */*\r\n";
    char lh[64];
    snprintf(lh, sizeof(lh), "localhost:%d", d->port);
    ask(d, "POST", "/execute", lh, curl, "application/x-www-form-urlencoded",
        "{\"command\":\"echo web-ok\"}", &a);
    expect(&t, "curl -d localhost /execute", &a, 200);
    if (!strstr(body_of(&a), "web-ok"))
        note(&t, "  curl -d: no output: %.200s\n", body_of(&a));
    ask(d, "POST", "/execute", "", curl, NULL, "{\"command\":\"true\"}", &a);
    expect(&t, "curl, no Content-Type, 127.0.0.1", &a, 200);
    ask(d, "POST", "/execute", "[::1]:8888", curl, "application/json", "{\"command\":\"true\"}",
        &a);
    expect(&t, "Host [::1]", &a, 200);
    /* A client with an Origin of this machine (the MCP Inspector's proxy, a dev server's
     * backend) and JSON. */
    static const char *const origins[] = {"http://localhost:5173", "http://127.0.0.1:8888",
                                          "https://localhost", "http://[::1]:3000"};
    for (size_t i = 0; i < sizeof(origins) / sizeof(origins[0]); i++) {
        char h[128];
        snprintf(h, sizeof(h), "Origin: %s\r\n", origins[i]);
        ask(d, "POST", "/execute", "", h, "application/json", "{\"command\":\"true\"}", &a);
        snprintf(what, sizeof(what), "Origin %s", origins[i]);
        expect(&t, what, &a, 200);
    }
    /* Node's fetch (Sec-Fetch-Mode: cors of its own accord): no browser, served, its FormData
     * upload too. */
    const char *node = "accept: */*\r\naccept-language: *\r\nsec-fetch-mode: cors\r\n"
                       "user-agent: node\r\n";
    ask(d, "POST", "/execute", "", node, "application/json", "{\"command\":\"true\"}", &a);
    expect(&t, "node fetch POST /execute", &a, 200);
    static const char node_ct[] = "multipart/form-data; boundary=----formdata-undici-0123";
    static const char node_mp[] = "------formdata-undici-0123\r\nContent-Disposition: form-data; "
                                  "name=\"file\"; filename=\"node.txt\"\r\n"
                                  "Content-Type: application/octet-stream\r\n\r\nfrom node\r\n"
                                  "------formdata-undici-0123--\r\n";
    ask(d, "POST", "/upload", "", node, node_ct, node_mp, &a);
    expect(&t, "node fetch POST /upload (FormData)", &a, 200);
    /* The SDK through the router (Host: the sandbox's Service), in-cluster by pod IP (v4
     * and v6), by the Service's short names, and from a container on the host. */
    static const char *const hosts[] = {"sbx-1234.team-a.svc.cluster.local:8888",
                                        "sbx-1234.team-a.svc:8888",
                                        "sbx-1234:8888",
                                        "10.0.0.7:8888",
                                        "[fd00::7]:8888",
                                        "10-0-0-7.team-a.pod.cluster.local",
                                        "host.docker.internal:8888",
                                        "SBX-1234.TEAM-A.SVC.CLUSTER.LOCAL.:8888"};
    static const char mp_ct[] = "multipart/form-data; boundary=0b7f3c2b9e6f4a1d";
    static const char mp[] = "--0b7f3c2b9e6f4a1d\r\nContent-Disposition: form-data; "
                             "name=\"file\"; filename=\"sdk/web.txt\"\r\n\r\nfrom the sdk\r\n"
                             "--0b7f3c2b9e6f4a1d--\r\n";
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        ask(d, "POST", "/execute", hosts[i], SDK, "application/json",
            "{\"command\": \"echo sdk-ok\"}", &a);
        snprintf(what, sizeof(what), "SDK POST /execute, Host %s", hosts[i]);
        expect(&t, what, &a, 200);
        ask(d, "POST", "/upload", hosts[i], SDK, mp_ct, mp, &a);
        snprintf(what, sizeof(what), "SDK POST /upload, Host %s", hosts[i]);
        expect(&t, what, &a, 200);
        ask(d, "GET", "/download/sdk%2Fweb.txt", hosts[i], SDK, NULL, NULL, &a);
        snprintf(what, sizeof(what), "SDK GET /download, Host %s", hosts[i]);
        expect(&t, what, &a, 200);
        ask(d, "GET", "/v1/files/sdk/web.txt", hosts[i], SDK, NULL, NULL, &a);
        snprintf(what, sizeof(what), "GET /v1/files, Host %s", hosts[i]);
        expect(&t, what, &a, 200);
    }
    /* The kubelet's probes (Host: the pod IP). */
    ask(d, "GET", "/healthz", "10.0.0.7:8888", "User-Agent: kube-probe/1.30\r\n", NULL, NULL, &a);
    expect(&t, "kube-probe /healthz", &a, 200);
    ask(d, "GET", "/v1/health", "10.0.0.7:8888", "User-Agent: kube-probe/1.30\r\n", NULL, NULL, &a);
    expect(&t, "kube-probe /v1/health", &a, 200);
    ck_assert_msg(t.bad == 0, "refused (%d):\n%s", t.bad, t.report);
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%.255s/node.txt", d->ws);
    unlink(p);
    snprintf(p, sizeof(p), "%.255s/sdk/web.txt", d->ws);
    unlink(p);
    snprintf(p, sizeof(p), "%.255s/sdk", d->ws);
    rmdir(p);
}
END_TEST

/* ------------------------------------------------------------------------------------ */
/* DNS rebinding: the page's own name now resolves to 127.0.0.1, so its requests are      */
/* same-origin, and a plain-HTTP GET carries neither Origin nor Sec-Fetch-*.              */

START_TEST(dns_rebinding_is_refused)
{
    struct daemon d;
    daemon_start(&d, NULL, NULL);
    put_ws(&d, "secret.txt", "the workspace's secret\n");
    struct answer a;
    struct tally t = {.len = 0};
    char what[256], host[128], origin[512];
    static const char *const names[] = {"rebind.evil.example", "localhost.evil.example",
                                        "127.0.0.1.nip.io", "sbx.svc.evil.example",
                                        "x.cluster.local.evil.example"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        snprintf(host, sizeof(host), "%s:%d", names[i], d.port);
        static const char *const reads[] = {"/files/secret.txt", "/download/secret.txt",
                                            "/v1/metadata", "/processes", "/healthz"};
        for (size_t j = 0; j < sizeof(reads) / sizeof(reads[0]); j++) {
            ask(&d, "GET", reads[j], host, BROWSER, NULL, NULL, &a);
            snprintf(what, sizeof(what), "GET %s, Host %s", reads[j], host);
            expect(&t, what, &a, 403);
            if (strstr(a.text, "the workspace's secret"))
                note(&t, "  %s: the secret was served\n", what);
        }
        /* Its POSTs are same-origin: Origin is the rebound name's. */
        snprintf(origin, sizeof(origin), BROWSER "Origin: http://%s\r\n", host);
        ask(&d, "POST", "/execute", host, origin, "text/plain",
            "{\"command\":\"touch pwned-rebind\"}", &a);
        snprintf(what, sizeof(what), "POST /execute, Host and Origin %s", host);
        expect(&t, what, &a, 403);
    }
    if (in_ws(&d, "pwned-rebind"))
        note(&t, "  a rebound page ran a command\n");
    ck_assert_msg(t.bad == 0, "a rebound page was served (%d):\n%s", t.bad, t.report);
    ck_assert(daemon_stop_clean(&d, 10000));

    /* With a token, every Host is served to whoever has it: a page cannot know it. */
    const char *env[] = {"SBXD_TOKEN=web-token-123", NULL};
    daemon_start(&d, NULL, env);
    put_ws(&d, "secret.txt", "the workspace's secret\n");
    ask(&d, "GET", "/files/secret.txt", "sandbox.example.com",
        "Authorization: Bearer web-token-123\r\n", NULL, NULL, &a);
    ck_assert_msg(a.status == 200, "%s", a.text);
    ask(&d, "GET", "/files/secret.txt", "rebind.evil.example", BROWSER, NULL, NULL, &a);
    ck_assert_msg(a.status == 401, "%s", a.text);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

/* --allow-host names more hosts (an ingress's, a custom cluster domain's); --allow-origin
 * (and its older name --mcp-allow-origin) admits a site's pages. */
START_TEST(allow_host_and_allow_origin_extend_the_rules)
{
    const char *args[] = {"--allow-host", "sandbox.corp.example,.apps.example", "--allow-origin",
                          "https://app.example", NULL};
    struct daemon d;
    daemon_start(&d, args, NULL);
    struct answer a;
    struct tally t = {.len = 0};
    char what[256];
    const struct {
        const char *host;
        int status;
    } hosts[] = {{"sandbox.corp.example:8888", 200},
                 {"a.apps.example", 200},
                 {"x.y.apps.example:80", 200},
                 {"apps.example", 200},
                 {"other.corp.example", 403},
                 {"apps.example.evil.example", 403},
                 {"xapps.example", 403}};
    for (size_t i = 0; i < sizeof(hosts) / sizeof(hosts[0]); i++) {
        ask(&d, "GET", "/files/", hosts[i].host, "User-Agent: curl/8.5.0\r\n", NULL, NULL, &a);
        snprintf(what, sizeof(what), "GET /files/, Host %s", hosts[i].host);
        expect(&t, what, &a, hosts[i].status);
    }
    ask(&d, "POST", "/execute", "", BROWSER "Origin: https://app.example\r\n", "application/json",
        "{\"command\":\"true\"}", &a);
    expect(&t, "Origin https://app.example (--allow-origin)", &a, 200);
    ask(&d, "POST", "/execute", "", BROWSER "Origin: https://other.example\r\n", "application/json",
        "{\"command\":\"true\"}", &a);
    expect(&t, "Origin https://other.example", &a, 403);
    ck_assert_msg(t.bad == 0, "(%d):\n%s", t.bad, t.report);
    ck_assert(daemon_stop_clean(&d, 10000));
    const char *old[] = {"--mcp-allow-origin", "https://app.example", NULL};
    daemon_start(&d, old, NULL);
    ask(&d, "POST", "/execute", "", BROWSER "Origin: https://app.example\r\n", "application/json",
        "{\"command\":\"true\"}", &a);
    ck_assert_msg(a.status == 200, "%s", a.text);
    ck_assert(daemon_stop_clean(&d, 10000));
}
END_TEST

Suite *web_suite(void)
{
    Suite *s = suite_create("web");
    TCase *tc = tcase_create("web");
    tcase_set_timeout(tc, 60 * SLOW);
    tcase_add_test(tc, cross_site_pages_change_nothing);
    tcase_add_test(tc, curl_sdk_router_and_probes_are_served);
    tcase_add_test(tc, dns_rebinding_is_refused);
    tcase_add_test(tc, allow_host_and_allow_origin_extend_the_rules);
    suite_add_tcase(s, tc);
    return s;
}
