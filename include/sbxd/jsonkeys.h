/*
 * jsonkeys.h - the member names of parsed JSON objects, checked in O(n log n).
 *
 * cJSON keeps every member of an object, a name given twice included, and its lookups find
 * the first: a decoder that acted on one value while a log, a proxy or another reader took
 * the other would act on a guess, so sbxd's decoders refuse a name given twice. Comparing
 * every pair of members is quadratic: one 1 MiB MCP message of 131,059 members cost about a
 * minute of CPU before any session was looked at. Here the names are sorted (a copy of
 * their pointers), and an object of more than SBXD_JSON_MAX_MEMBERS members is refused
 * before anything is sorted.
 */
#ifndef SBXD_JSONKEYS_H
#define SBXD_JSONKEYS_H

#include <cjson/cJSON.h>

enum json_keys_fault {
    JSON_KEYS_OK = 0,
    JSON_KEYS_DUPLICATE, /* a name is given twice */
    JSON_KEYS_TOO_MANY,  /* an object has more than SBXD_JSON_MAX_MEMBERS members */
    JSON_KEYS_NO_MEMORY,
};

/* obj's own members (not those of the objects within): JSON_KEYS_OK, or the fault, with
 * *dup (unless dup is NULL) the name given twice for JSON_KEYS_DUPLICATE. Anything but an
 * object is JSON_KEYS_OK. */
enum json_keys_fault json_keys_check(const cJSON *obj, const char **dup);

/* The same for v and every object within it, at any depth (arrays' elements included): the
 * first fault found. */
enum json_keys_fault json_keys_check_tree(const cJSON *v, const char **dup);

#endif
