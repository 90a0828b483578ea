/*
 * http.c - sbx's libcurl plumbing: one request at a time, its body streamed to a sink or
 * kept, uploads streamed from an fd, and every failure turned into one line for a person.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "sbx.h"

/* What an error answer or a JSON answer may grow to in memory: far more than any answer of
 * sbxd (a synchronous /execute keeps 1 MiB per stream, 4/3 of that in base64), far less than
 * what would hurt. */
#define SBX_MAX_KEPT_BODY (256u * 1024 * 1024)
/* One NDJSON event: an output chunk in base64 is a few hundred KiB at most. */
#define SBX_MAX_EVENT_LINE     (64u * 1024 * 1024)
#define SBX_CONNECT_TIMEOUT_MS 10000L

int buf_append(struct buf *b, const void *p, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return -1;
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, p, n);
    b->len += n;
    b->p[b->len] = '\0';
    return 0;
}

void buf_free(struct buf *b)
{
    free(b->p);
    *b = (struct buf){0};
}

/* RFC 3986 unreserved characters, which never need encoding. */
static bool unreserved(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

char *url_path(const char *prefix, const char *rel)
{
    /* sbxd drops leading slashes itself; dropping them here keeps "/files//x" out of logs. */
    while (*rel == '/')
        rel++;
    size_t plen = strlen(prefix), rlen = strlen(rel);
    char *out = malloc(plen + rlen * 3 + 1);
    if (!out)
        return NULL;
    memcpy(out, prefix, plen);
    char *o = out + plen;
    /* Everything else is encoded: ' ', '%', '#' and '?' would otherwise end or change the
     * path, and a byte over 0x7f is not allowed in a URL at all. */
    for (const unsigned char *c = (const unsigned char *)rel; *c; c++) {
        if (unreserved(*c) || *c == '/') {
            *o++ = (char)*c;
        } else {
            static const char hex[] = "0123456789ABCDEF";
            *o++ = '%';
            *o++ = hex[*c >> 4];
            *o++ = hex[*c & 15];
        }
    }
    *o = '\0';
    return out;
}

/* The state of one transfer, shared by the callbacks. */
struct xfer {
    CURL *c;
    const struct request *req;
    struct response *resp;
    bool checked; /* the status and type were looked at (first body bytes) */
    bool to_sink; /* the body goes to req->sink */
    bool failed;  /* a callback stopped the transfer; err says why */
    char err[512];
    struct progress prog;
};

/* The status and Content-Type, once the headers are in. */
static void xfer_check(struct xfer *x)
{
    if (x->checked)
        return;
    x->checked = true;
    long status = 0;
    char *ct = NULL;
    if (curl_easy_getinfo(x->c, CURLINFO_RESPONSE_CODE, &status) == CURLE_OK)
        x->resp->status = status;
    if (curl_easy_getinfo(x->c, CURLINFO_CONTENT_TYPE, &ct) == CURLE_OK && ct)
        snprintf(x->resp->content_type, sizeof(x->resp->content_type), "%s", ct);
    /* Only a success of the expected type is streamed: an error's {"code","message"} (or a
     * directory listing where a file was asked for) is kept for the caller to read. */
    const char *want = x->req->sink_type;
    x->to_sink = x->req->sink && status / 100 == 2 &&
                 (!want || strncasecmp(x->resp->content_type, want, strlen(want)) == 0);
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    xfer_check(x);
    if (x->to_sink) {
        if (x->req->sink(p, n, x->req->sink_ud, x->err, sizeof(x->err)) < 0) {
            x->failed = true;
            return 0; /* anything but n stops the transfer */
        }
        return n;
    }
    if (x->resp->body.len + n > SBX_MAX_KEPT_BODY) {
        snprintf(x->err, sizeof(x->err), "sbxd's answer is larger than %u MiB",
                 SBX_MAX_KEPT_BODY >> 20);
        x->failed = true;
        return 0;
    }
    if (buf_append(&x->resp->body, p, n) < 0) {
        snprintf(x->err, sizeof(x->err), "out of memory");
        x->failed = true;
        return 0;
    }
    return n;
}

/* The upload, read from the fd as curl asks for it: never the whole file in memory. */
static size_t on_read(char *p, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    if (!x->req->upload)
        return 0; /* a PUT without a body (mkdir) */
    ssize_t k;
    do
        k = read(x->req->upload_fd, p, size * nmemb);
    while (k < 0 && errno == EINTR);
    if (k < 0) {
        snprintf(x->err, sizeof(x->err), "cannot read %s: %s",
                 x->req->progress_label ? x->req->progress_label : "the upload", strerror(errno));
        x->failed = true;
        return CURL_READFUNC_ABORT;
    }
    return (size_t)k;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                       curl_off_t ulnow)
{
    struct xfer *x = ud;
    if (x->req->upload)
        progress_update(&x->prog, ulnow, ultotal);
    else
        progress_update(&x->prog, dlnow, dltotal);
    return 0;
}

/* "Authorization: Bearer ..." when sbxd wants a token: SBX_TOKEN, else the first line of the
 * file SBX_TOKEN_FILE names. Empty when neither is set. */
const char *sbx_auth_header(void)
{
    static char line[4200];
    static bool loaded;
    if (loaded)
        return line;
    loaded = true;
    char token[4097] = "";
    const char *t = getenv("SBX_TOKEN");
    const char *file = getenv("SBX_TOKEN_FILE");
    if (t && *t) {
        snprintf(token, sizeof(token), "%s", t);
    } else if (file && *file) {
        FILE *f = fopen(file, "re");
        if (f) {
            if (!fgets(token, sizeof(token), f))
                token[0] = '\0';
            fclose(f);
        }
        token[strcspn(token, "\r\n")] = '\0';
    }
    if (token[0])
        snprintf(line, sizeof(line), "Authorization: Bearer %s", token);
    return line;
}

/* The headers of the request into *out (NULL: none); -1 when out of memory. */
static int request_headers(const struct request *req, struct curl_slist **out)
{
    char accept[256], if_match[448];
    const char *lines[5];
    size_t n = 0;
    if (*sbx_auth_header())
        lines[n++] = sbx_auth_header();
    if (req->accept) {
        snprintf(accept, sizeof(accept), "Accept: %s", req->accept);
        lines[n++] = accept;
    }
    if (req->json)
        lines[n++] = "Content-Type: application/json";
    if (req->if_match) {
        snprintf(if_match, sizeof(if_match), "If-Match: %s", req->if_match);
        lines[n++] = if_match;
    }
    if (req->upload) /* a file's bytes, never taken for a multipart form */
        lines[n++] = "Content-Type: application/octet-stream";
    *out = NULL;
    for (size_t i = 0; i < n; i++) {
        struct curl_slist *t = curl_slist_append(*out, lines[i]);
        if (!t) {
            curl_slist_free_all(*out);
            *out = NULL;
            return -1;
        }
        *out = t;
    }
    return 0;
}

/* Set every option of the transfer; the first that fails is returned. */
static CURLcode xfer_setup(struct xfer *x, const char *url, struct curl_slist *hdrs, char *errbuf)
{
    CURL *c = x->c;
    const struct request *req = x->req;
    CURLcode rc;
#define SET(opt, val)                                                                              \
    do {                                                                                           \
        if ((rc = curl_easy_setopt(c, opt, val)) != CURLE_OK)                                      \
            return rc;                                                                             \
    } while (0)
    SET(CURLOPT_ERRORBUFFER, errbuf);
    SET(CURLOPT_URL, url);
    /* Only HTTP: a --url of file:// or ftp:// is a mistake, never something to follow. */
    SET(CURLOPT_PROTOCOLS_STR, "http,https");
    /* "../x" must reach sbxd as written (it answers 403), not be tidied into another route. */
    SET(CURLOPT_PATH_AS_IS, 1L);
    SET(CURLOPT_NOSIGNAL, 1L);
    SET(CURLOPT_USERAGENT, "sbx/" SBXD_VERSION);
    /* No overall timeout: a command or a download may rightly take hours. Connecting must not,
     * and keepalive notices a peer that vanished. */
    SET(CURLOPT_CONNECTTIMEOUT_MS, SBX_CONNECT_TIMEOUT_MS);
    SET(CURLOPT_TCP_KEEPALIVE, 1L);
    SET(CURLOPT_HTTPHEADER, hdrs);
    SET(CURLOPT_WRITEFUNCTION, on_body);
    SET(CURLOPT_WRITEDATA, x);
    if (strcmp(req->method, "HEAD") == 0) {
        SET(CURLOPT_NOBODY, 1L);
    } else if (strcmp(req->method, "PUT") == 0) {
        SET(CURLOPT_UPLOAD, 1L);
        SET(CURLOPT_READFUNCTION, on_read);
        SET(CURLOPT_READDATA, x);
        /* Unknown (stdin, a pipe): chunked. A PUT without a body: Content-Length: 0. */
        curl_off_t size = req->upload ? (curl_off_t)req->upload_size : 0;
        if (size >= 0)
            SET(CURLOPT_INFILESIZE_LARGE, size);
    } else if (strcmp(req->method, "POST") == 0) {
        SET(CURLOPT_POSTFIELDS, req->json ? req->json : "");
    } else if (strcmp(req->method, "GET") != 0) {
        SET(CURLOPT_CUSTOMREQUEST, req->method);
    }
    if (x->prog.enabled) {
        SET(CURLOPT_NOPROGRESS, 0L);
        SET(CURLOPT_XFERINFOFUNCTION, on_progress);
        SET(CURLOPT_XFERINFODATA, x);
    }
#undef SET
    return CURLE_OK;
}

/* Why there is no answer, in one line. */
static void report_transfer_error(const struct sbx *s, const char *cmd, struct xfer *x, CURLcode rc,
                                  const char *errbuf)
{
    if (x->failed) {
        if (x->err[0]) /* empty: the callback reported it itself */
            fail(cmd, "%s", x->err);
        return;
    }
    const char *why = errbuf[0] ? errbuf : curl_easy_strerror(rc);
    curl_off_t connect_us = 0;
    bool connected =
        curl_easy_getinfo(x->c, CURLINFO_CONNECT_TIME_T, &connect_us) == CURLE_OK && connect_us > 0;
    if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
        rc == CURLE_COULDNT_RESOLVE_PROXY || !connected)
        fail(NULL, "cannot reach sbxd at %s: %s", s->url, why);
    else
        fail(cmd, "the connection to sbxd failed: %s", why);
}

int http_perform(const struct sbx *s, const char *cmd, const struct request *req,
                 struct response *resp)
{
    memset(resp, 0, sizeof(*resp));
    resp->content_length = -1;
    struct xfer x = {.req = req, .resp = resp};
    char errbuf[CURL_ERROR_SIZE] = "";
    char *url = malloc(strlen(s->url) + strlen(req->path) + 1);
    struct curl_slist *hdrs = NULL;
    int ret = -1;
    if (!url || request_headers(req, &hdrs) < 0) {
        fail(cmd, "out of memory");
        goto out;
    }
    strcpy(url, s->url);
    strcat(url, req->path);
    if (!(x.c = curl_easy_init())) {
        fail(cmd, "cannot initialise libcurl");
        goto out;
    }
    progress_init(&x.prog, req->progress_label, req->progress);
    CURLcode rc = xfer_setup(&x, url, hdrs, errbuf);
    if (rc != CURLE_OK) {
        fail(cmd, "cannot set up the request: %s", curl_easy_strerror(rc));
        goto out;
    }
    rc = curl_easy_perform(x.c);
    progress_end(&x.prog);
    if (rc != CURLE_OK) {
        report_transfer_error(s, cmd, &x, rc, errbuf);
        goto out;
    }
    /* An answer without a body never reached on_body. */
    xfer_check(&x);
    curl_off_t cl = -1;
    if (curl_easy_getinfo(x.c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl) == CURLE_OK)
        resp->content_length = cl;
    if (resp->body.len && response_is_json(resp))
        resp->json = cJSON_ParseWithLength(resp->body.p, resp->body.len);
    ret = 0;
out:
    if (x.c)
        curl_easy_cleanup(x.c);
    curl_slist_free_all(hdrs);
    free(url);
    return ret;
}

void response_free(struct response *resp)
{
    buf_free(&resp->body);
    cJSON_Delete(resp->json);
    resp->json = NULL;
}

bool response_is_json(const struct response *resp)
{
    return strncasecmp(resp->content_type, "application/json", 16) == 0;
}

int http_report(const char *cmd, const struct response *resp)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(resp->json, "message");
    fflush(stdout);
    fprintf(stderr, "sbx: %s: ", cmd);
    if (cJSON_IsString(m) && m->valuestring[0]) {
        put_escaped(stderr, m->valuestring);
    } else if (resp->body.len) {
        /* Not sbxd's error format (a proxy in between?): its first line, shortened. */
        char line[161];
        size_t n = strcspn(resp->body.p, "\r\n");
        snprintf(line, sizeof(line), "%.*s", (int)(n < 160 ? n : 160), resp->body.p);
        fputs("sbxd answered: ", stderr);
        put_escaped(stderr, line);
    } else {
        fputs("sbxd answered with an error and no message", stderr);
    }
    fprintf(stderr, " (HTTP %ld)\n", resp->status);
    return SBX_FAIL;
}

/* One complete line of the stream. */
static int ndjson_line(struct ndjson *nd, const char *p, size_t n, char *err, size_t errlen)
{
    while (n && (p[n - 1] == '\r' || p[n - 1] == ' '))
        n--;
    if (n == 0 || nd->done)
        return 0; /* blank lines are allowed; nothing counts after the end */
    cJSON *ev = cJSON_ParseWithLength(p, n);
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(ev, "type");
    if (!cJSON_IsString(type)) {
        cJSON_Delete(ev);
        snprintf(err, errlen, "sbxd sent a malformed event: %.*s", (int)(n < 80 ? n : 80), p);
        return -1;
    }
    int r = nd->on_event(ev, nd->ud, err, errlen);
    cJSON_Delete(ev);
    if (r == 1)
        nd->done = true;
    return r < 0 ? -1 : 0;
}

int ndjson_sink(const char *p, size_t n, void *ud, char *err, size_t errlen)
{
    struct ndjson *nd = ud;
    const char *end = p + n;
    /* Whole lines straight from curl's buffer; only a line cut between two chunks is
     * copied. */
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            if (nd->line.len + (size_t)(end - p) > SBX_MAX_EVENT_LINE) {
                snprintf(err, errlen, "sbxd sent an event over %u MiB", SBX_MAX_EVENT_LINE >> 20);
                return -1;
            }
            if (buf_append(&nd->line, p, (size_t)(end - p)) < 0) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            return 0;
        }
        int r;
        if (nd->line.len) {
            if (buf_append(&nd->line, p, (size_t)(nl - p)) < 0) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            r = ndjson_line(nd, nd->line.p, nd->line.len, err, errlen);
            nd->line.len = 0;
        } else {
            r = ndjson_line(nd, p, (size_t)(nl - p), err, errlen);
        }
        if (r < 0)
            return -1;
        p = nl + 1;
    }
    return 0;
}

int ndjson_finish(struct ndjson *nd, char *err, size_t errlen)
{
    int r = 0;
    if (nd->line.len)
        r = ndjson_line(nd, nd->line.p, nd->line.len, err, errlen);
    buf_free(&nd->line);
    return r;
}
