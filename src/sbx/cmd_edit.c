/*
 * cmd_edit.c - sbx edit: an exact replacement in a workspace file (POST /files/PATH?edit),
 * the text given as arguments or the whole request as JSON on stdin, so that code with
 * quotes and $ needs no shell quoting through sed.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx.h"

/* The request: {old, new, replace_all} from the arguments, or stdin's JSON as it is. */
static char *edit_body(const char *cmd, int argc, char **argv, bool all, int *rc)
{
    int n = argc - optind;
    *rc = SBX_OK;
    if (n == 2 && strcmp(argv[optind + 1], "-") == 0) {
        struct buf b = {0};
        *rc = read_stdin_all(cmd, &b, 64u << 20, "the edit on stdin is over 64 MiB",
                             "the edit on stdin holds a NUL byte");
        if (*rc != SBX_OK) {
            buf_free(&b);
            return NULL;
        }
        return b.p;
    }
    cJSON *o = cJSON_CreateObject();
    if (!o || !cJSON_AddStringToObject(o, "old", argv[optind + 1]) ||
        !cJSON_AddStringToObject(o, "new", argv[optind + 2]) ||
        !cJSON_AddBoolToObject(o, "replace_all", all)) {
        cJSON_Delete(o);
        *rc = fail(cmd, "out of memory");
        return NULL;
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s)
        *rc = fail(cmd, "out of memory");
    return s;
}

/* "PATH: 2 replacements, lines 3-4, 9" from sbxd's answer. */
static void edit_summary(const char *path, const cJSON *a)
{
    double count = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(a, "replacements"));
    printf("%s: %.0f replacement%s", path, count, count == 1 ? "" : "s");
    const cJSON *l, *all = cJSON_GetObjectItemCaseSensitive(a, "lines");
    const cJSON *one = cJSON_GetArraySize(all) == 1 ? cJSON_GetArrayItem(all, 0) : NULL;
    bool single = one && cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(one, "start")) ==
                             cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(one, "end"));
    const char *sep = single ? ", line " : ", lines ";
    cJSON_ArrayForEach(l, all)
    {
        double s = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(l, "start"));
        double e = cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(l, "end"));
        printf(e != s ? "%s%.0f-%.0f" : "%s%.0f", sep, s, e);
        sep = ", ";
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(a, "lines_cut")))
        printf(", ...");
    putchar('\n');
}

int cmd_edit(const struct sbx *s, const struct sbx_cmd *cmd, int argc, char **argv)
{
    static const struct option longs[] = {{"all", no_argument, NULL, 'a'},
                                          {"if-match", required_argument, NULL, 'm'},
                                          {"json", no_argument, NULL, 'j'},
                                          {NULL, 0, NULL, 0}};
    bool all = false, json = false;
    const char *if_match = NULL;
    int c;
    opt_reset();
    while ((c = opt_next(cmd->name, argc, argv, "am:j", longs)) != -1) {
        if (c == 'h')
            return cmd_print_help(cmd);
        if (c == 'a')
            all = true;
        else if (c == 'm')
            if_match = optarg;
        else if (c == 'j')
            json = true;
        else
            return SBX_USAGE;
    }
    int n = argc - optind;
    bool from_stdin = n == 2 && strcmp(argv[optind + 1], "-") == 0;
    if (n != 3 && !from_stdin)
        return usage_error(cmd->name, "sbx edit PATH OLD NEW, or sbx edit PATH - (JSON on stdin)");
    if (from_stdin && all)
        return usage_error(cmd->name, "--all goes with OLD NEW; in JSON, say replace_all");
    if (!*argv[optind])
        return usage_error(cmd->name, "PATH is empty");
    if (if_match && (strlen(if_match) > 400 || strpbrk(if_match, "\r\n")))
        return usage_error(cmd->name, "--if-match takes an ETag");
    int rc;
    char *body = edit_body(cmd->name, argc, argv, all, &rc);
    if (!body)
        return rc;
    char *p = url_path("/files/", argv[optind]);
    char *path = p ? malloc(strlen(p) + 8) : NULL;
    if (path)
        snprintf(path, strlen(p) + 8, "%s?edit", p);
    free(p);
    if (!path) {
        free(body);
        return fail(cmd->name, "out of memory");
    }
    struct request req = {.method = "POST", .path = path, .json = body, .if_match = if_match};
    struct response resp;
    int r = SBX_FAIL;
    if (http_perform(s, cmd->name, &req, &resp) == 0) {
        if (resp.status / 100 != 2)
            r = http_report(cmd->name, &resp);
        else if (json)
            r = write_all(1, resp.body.p, resp.body.len) < 0 ? SBX_FAIL : SBX_OK;
        else {
            edit_summary(argv[optind], resp.json);
            r = SBX_OK;
        }
    }
    response_free(&resp);
    free(path);
    free(body);
    return r;
}
