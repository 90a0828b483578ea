/*
 * cmd_search.c - grep and find over GET /files/{dir}?grep= and ?glob=: sbxd searches, sbx
 * prints the stream of results as it comes (grep -rn's "path:line:text", find's paths).
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx.h"

struct search_out {
    bool grep;
    bool long_form; /* find -l: type and size too */
    unsigned context;
    bool json;      /* print the events as they come */
    uint64_t shown; /* results printed */
    cJSON *summary; /* the stream's end */
    bool separate;  /* a "--" before the next group of context lines */
};

/* Append key=value, value percent-encoded, to the query q. */
static int query_add(struct buf *q, const char *key, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    if (buf_append(q, q->len ? "&" : "?", 1) < 0 || buf_append(q, key, strlen(key)) < 0 ||
        buf_append(q, "=", 1) < 0)
        return -1;
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
        char e[3] = {'%', hex[*p >> 4], hex[*p & 15]};
        bool plain = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                     (*p >= '0' && *p <= '9') || strchr("-._~", *p);
        if (buf_append(q, plain ? (const char *)p : e, plain ? 1 : 3) < 0)
            return -1;
    }
    return 0;
}

static void print_line(const char *path, double no, char sep, const char *text)
{
    put_escaped(stdout, path);
    printf("%c%.0f%c", sep, no, sep);
    put_escaped(stdout, text);
    putchar('\n');
}

static void print_context(const char *path, const cJSON *m, const char *key, double first)
{
    const cJSON *a = cJSON_GetObjectItem(m, key);
    int i = 0;
    for (const cJSON *l = a ? a->child : NULL; l; l = l->next, i++)
        if (cJSON_IsString(l))
            print_line(path, first + i, '-', l->valuestring);
}

static int search_event(const cJSON *ev, void *ud, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    struct search_out *o = ud;
    const cJSON *type = cJSON_GetObjectItem(ev, "type");
    bool summary = cJSON_IsString(type) && strcmp(type->valuestring, "summary") == 0;
    if (o->json) {
        char *t = cJSON_PrintUnformatted(ev);
        if (t)
            puts(t);
        free(t);
    }
    if (summary) {
        o->summary = cJSON_Duplicate(ev, 1);
        return 1;
    }
    o->shown++;
    if (o->json)
        return 0;
    const cJSON *path = cJSON_GetObjectItem(ev, "path");
    if (!cJSON_IsString(path))
        return 0;
    if (!o->grep) {
        if (o->long_form)
            printf("%-9s %12.0f  ", cJSON_IsString(type) ? type->valuestring : "?",
                   cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "size")));
        put_escaped(stdout, path->valuestring);
        putchar('\n');
        return 0;
    }
    double no = cJSON_GetNumberValue(cJSON_GetObjectItem(ev, "line"));
    const cJSON *before = cJSON_GetObjectItem(ev, "before");
    if (o->context && o->separate)
        puts("--");
    o->separate = true;
    print_context(path->valuestring, ev, "before", no - cJSON_GetArraySize(before));
    const cJSON *text = cJSON_GetObjectItem(ev, "text");
    print_line(path->valuestring, no, ':', cJSON_IsString(text) ? text->valuestring : "");
    print_context(path->valuestring, ev, "after", no + 1);
    return 0;
}

/* Send the search whose query is q (dir the directory) and print it. */
static int search_send(const struct sbx *s, const char *cmd, const char *dir, struct buf *q,
                       struct search_out *o)
{
    char *p = url_path("/files/", dir);
    struct buf path = {0};
    if (!p || buf_append(&path, p, strlen(p)) < 0 || buf_append(&path, q->p, q->len) < 0) {
        free(p);
        buf_free(&path);
        return fail(cmd, "out of memory");
    }
    free(p);
    struct ndjson nd = {.on_event = search_event, .ud = o};
    struct request req = {.method = "GET",
                          .path = path.p,
                          .accept = "application/x-ndjson",
                          .sink = ndjson_sink,
                          .sink_ud = &nd,
                          .sink_type = "application/x-ndjson"};
    struct response resp;
    char err[256] = "";
    int r;
    if (http_perform(s, cmd, &req, &resp) < 0)
        r = SBX_FAIL;
    else if (resp.status != 200)
        r = http_report(cmd, &resp);
    else if (ndjson_finish(&nd, err, sizeof(err)) < 0)
        r = fail(cmd, "%s", err);
    else if (!o->summary)
        r = fail(cmd, "the stream from sbxd ended before its summary");
    else {
        if (cJSON_IsTrue(cJSON_GetObjectItem(o->summary, "truncated")))
            fprintf(stderr, "sbx: %s: stopped at %.0f results (-m raises the cap)\n", cmd,
                    cJSON_GetNumberValue(cJSON_GetObjectItem(o->summary, "max_matches")));
        double unreadable =
            cJSON_GetNumberValue(cJSON_GetObjectItem(o->summary, "skipped_unreadable"));
        if (unreadable > 0)
            fprintf(stderr, "sbx: %s: %.0f files or directories could not be read\n", cmd,
                    unreadable);
        r = o->shown ? SBX_OK : 1; /* as grep: 1 when nothing was found */
    }
    fflush(stdout);
    buf_free(&nd.line);
    buf_free(&path);
    cJSON_Delete(o->summary);
    response_free(&resp);
    return r;
}

/* The options both commands share: 0 when taken, 1 when c is not one of them, -1 on a bad
 * value (reported). */
static int common_option(const char *cmd, int c, struct buf *q, struct search_out *o)
{
    switch (c) {
    case 'g':
        return query_add(q, "glob", optarg) < 0 ? -1 : 0;
    case 'x':
        return query_add(q, "exclude", optarg) < 0 ? -1 : 0;
    case 't':
        return query_add(q, "type", optarg) < 0 ? -1 : 0;
    case 'm':
        return query_add(q, "max_matches", optarg) < 0 ? -1 : 0;
    case 'G':
        return query_add(q, "include_git", "true") < 0 ? -1 : 0;
    case 'j':
        o->json = true;
        return 0;
    default:
        (void)cmd;
        return 1;
    }
}

int cmd_grep(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"regex", no_argument, NULL, 'E'},
                                          {"ignore-case", no_argument, NULL, 'i'},
                                          {"glob", required_argument, NULL, 'g'},
                                          {"exclude", required_argument, NULL, 'x'},
                                          {"type", required_argument, NULL, 't'},
                                          {"context", required_argument, NULL, 'C'},
                                          {"max", required_argument, NULL, 'm'},
                                          {"binary", no_argument, NULL, 'a'},
                                          {"include-git", no_argument, NULL, 'G'},
                                          {"json", no_argument, NULL, 'j'},
                                          {NULL, 0, NULL, 0}};
    struct search_out o = {.grep = true};
    struct buf q = {0};
    int c, r = SBX_OK;
    opt_reset();
    while (r == SBX_OK && (c = opt_next(cmd->name, argc, argv, "Eig:x:t:C:m:aGj", longs)) != -1) {
        int k = common_option(cmd->name, c, &q, &o);
        if (k == 0)
            continue;
        if (c == 'h')
            r = cmd_print_help(cmd) == SBX_OK ? -2 : SBX_FAIL;
        else if (c == 'E')
            k = query_add(&q, "regex", "true");
        else if (c == 'i')
            k = query_add(&q, "ignore_case", "true");
        else if (c == 'a')
            k = query_add(&q, "binary", "true");
        else if (c == 'C') {
            o.context = (unsigned)strtoul(optarg, NULL, 10);
            k = query_add(&q, "context", optarg);
        } else
            r = SBX_USAGE;
        if (k < 0)
            r = fail(cmd->name, "out of memory");
    }
    if (r == SBX_OK && argc - optind < 1)
        r = usage_error(cmd->name, "no pattern given: sbx grep [OPTIONS] PATTERN [DIR]");
    if (r == SBX_OK && argc - optind > 2)
        r = usage_error(cmd->name, "one directory at a time: sbx grep [OPTIONS] PATTERN [DIR]");
    if (r == SBX_OK && query_add(&q, "grep", argv[optind]) < 0)
        r = fail(cmd->name, "out of memory");
    if (r == SBX_OK)
        r = search_send(s, cmd->name, argc - optind > 1 ? argv[optind + 1] : "", &q, &o);
    buf_free(&q);
    return r == -2 ? SBX_OK : r;
}

int cmd_find(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"exclude", required_argument, NULL, 'x'},
                                          {"type", required_argument, NULL, 't'},
                                          {"max", required_argument, NULL, 'm'},
                                          {"include-git", no_argument, NULL, 'G'},
                                          {"long", no_argument, NULL, 'l'},
                                          {"json", no_argument, NULL, 'j'},
                                          {NULL, 0, NULL, 0}};
    struct search_out o = {0};
    struct buf q = {0};
    int c, r = SBX_OK;
    opt_reset();
    while (r == SBX_OK && (c = opt_next(cmd->name, argc, argv, "x:t:m:Glj", longs)) != -1) {
        if (common_option(cmd->name, c, &q, &o) == 0)
            continue;
        if (c == 'h')
            r = cmd_print_help(cmd) == SBX_OK ? -2 : SBX_FAIL;
        else if (c == 'l')
            o.long_form = true;
        else
            r = SBX_USAGE;
    }
    if (r == SBX_OK && (argc - optind < 1 || argc - optind > 2))
        r = usage_error(cmd->name, "sbx find [OPTIONS] GLOB [DIR]");
    if (r == SBX_OK && query_add(&q, "glob", argv[optind]) < 0)
        r = fail(cmd->name, "out of memory");
    if (r == SBX_OK)
        r = search_send(s, cmd->name, argc - optind > 1 ? argv[optind + 1] : "", &q, &o);
    buf_free(&q);
    return r == -2 ? SBX_OK : r;
}
