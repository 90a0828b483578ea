/*
 * edit_parse.c - an edit request's JSON (POST /files/{path}?edit, MCP's edit_file) as the
 * edits fs_edit_file applies. The edits point into the JSON's own strings.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sbxd/edit.h"
#include "sbxd/fs_limits.h"

/* A key's name as the request spells it: "old" or its long form "old_string" (the name
 * coding agents' edit tools use), and the same for "new". */
static bool key_is(const char *k, const char *name, const char *alias)
{
    return strcmp(k, name) == 0 || strcmp(k, alias) == 0;
}

static bool in_list(const char *k, const char *const *list)
{
    for (; list && *list; list++)
        if (strcmp(k, *list) == 0)
            return true;
    return false;
}

/* One edit's fields out of o (where: "" or " in edits[N]"). */
static int parse_one(const cJSON *o, struct fs_edit *e, const char *const *extra, const char *where,
                     struct sbxd_err *err)
{
    const cJSON *old = NULL, *new = NULL, *all = NULL, *it;
    cJSON_ArrayForEach(it, o)
    {
        const char *k = it->string;
        const cJSON **slot = key_is(k, "old", "old_string")   ? &old
                             : key_is(k, "new", "new_string") ? &new
                             : strcmp(k, "replace_all") == 0  ? &all
                                                              : NULL;
        if (!slot && in_list(k, extra))
            continue;
        if (!slot)
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                             "unknown key '%.64s'%s: an edit takes old, new and replace_all", k,
                             where);
        if (*slot)
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "'%.64s' is given twice%s", k, where);
        *slot = it;
    }
    if (!cJSON_IsString(old) || !cJSON_IsString(new))
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "old and new are required%s, as strings (the exact text to replace, "
                         "and its replacement)",
                         where);
    if (all && !cJSON_IsBool(all))
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL, "replace_all must be true or false%s", where);
    e->old_text = old->valuestring;
    e->old_len = strlen(old->valuestring);
    e->new_text = new->valuestring;
    e->new_len = strlen(new->valuestring);
    e->replace_all = cJSON_IsTrue(all);
    /* An empty old text occurs everywhere: it would insert new between every two bytes. */
    if (e->old_len == 0)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "old must not be empty%s: it names the exact text to replace", where);
    return 0;
}

static int parse_list(const cJSON *list, struct fs_edit **out, size_t *n, struct sbxd_err *err)
{
    int count = cJSON_GetArraySize(list);
    if (!cJSON_IsArray(list) || count < 1 || count > SBXD_EDIT_MAX_EDITS)
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "edits must be an array of 1 to %d edits ({old, new, replace_all})",
                         SBXD_EDIT_MAX_EDITS);
    *out = calloc((size_t)count, sizeof(**out));
    if (!*out)
        return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
    const cJSON *it;
    size_t i = 0;
    cJSON_ArrayForEach(it, list)
    {
        char where[48];
        snprintf(where, sizeof(where), " in edits[%zu]", i);
        if (!cJSON_IsObject(it) || parse_one(it, &(*out)[i], NULL, where, err) < 0) {
            if (!cJSON_IsObject(it))
                sbxd_fail(err, SBXD_E_INVALID, EINVAL, "edits[%zu] must be an object", i);
            free(*out);
            *out = NULL;
            return -1;
        }
        i++;
    }
    *n = i;
    return 0;
}

int fs_edit_parse(const struct cJSON *req, const char *const *extra, struct fs_edit **out,
                  size_t *n, struct sbxd_err *err)
{
    *out = NULL;
    *n = 0;
    if (!cJSON_IsObject(req))
        return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                         "the body must be a JSON object: {old, new, replace_all} or {edits: "
                         "[...]}");
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(req, "edits");
    if (!list) {
        *out = calloc(1, sizeof(**out));
        if (!*out)
            return sbxd_fail(err, SBXD_E_INTERNAL, ENOMEM, "out of memory");
        if (parse_one(req, *out, extra, "", err) < 0) {
            free(*out);
            *out = NULL;
            return -1;
        }
        *n = 1;
        return 0;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, req)
    {
        if (strcmp(it->string, "edits") != 0 && !in_list(it->string, extra))
            return sbxd_fail(err, SBXD_E_INVALID, EINVAL,
                             "'%.64s' beside edits: give either one edit (old, new, replace_all) "
                             "or a list of them in edits",
                             it->string);
    }
    return parse_list(list, out, n, err);
}
