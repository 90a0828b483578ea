/* Member names of parsed JSON objects (jsonkeys.h). */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/jsonkeys.h"
#include "sbxd/limits.h"

/* Objects of up to this many members are checked with the names on the stack. */
#define KEYS_ON_STACK 32

static int cmp_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

enum json_keys_fault json_keys_check(const cJSON *obj, const char **dup)
{
    if (!cJSON_IsObject(obj))
        return JSON_KEYS_OK;
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        if (++n > SBXD_JSON_MAX_MEMBERS)
            return JSON_KEYS_TOO_MANY; /* counted no further: the refusal costs the cap */
    if (n < 2)
        return JSON_KEYS_OK;
    const char *local[KEYS_ON_STACK];
    const char **names = n <= KEYS_ON_STACK ? local : malloc(n * sizeof(*names));
    if (!names)
        return JSON_KEYS_NO_MEMORY;
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        names[i++] = c->string ? c->string : "";
    qsort(names, n, sizeof(*names), cmp_name);
    enum json_keys_fault f = JSON_KEYS_OK;
    for (i = 1; i < n; i++)
        if (strcmp(names[i - 1], names[i]) == 0) {
            f = JSON_KEYS_DUPLICATE;
            if (dup)
                *dup = names[i]; /* (a member's own string: it outlives names) */
            break;
        }
    if (names != local)
        free(names);
    return f;
}

enum json_keys_fault json_keys_check_tree(const cJSON *v, const char **dup)
{
    /* The depth is cJSON's: its parser refuses nesting beyond CJSON_NESTING_LIMIT (1000),
     * and each level here is a small frame. */
    if (!cJSON_IsObject(v) && !cJSON_IsArray(v))
        return JSON_KEYS_OK;
    enum json_keys_fault f = json_keys_check(v, dup);
    for (const cJSON *c = v->child; c && f == JSON_KEYS_OK; c = c->next)
        f = json_keys_check_tree(c, dup);
    return f;
}
