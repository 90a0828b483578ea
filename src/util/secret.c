/*
 * secret.c - credential-looking environment variables (secret.h).
 *
 * The name markers are the reference sandboxd's (agent-sandbox packages/sandboxd,
 * sensitiveEnvMarkers: a substring of the upper-cased name), plus PWD (a password's usual
 * short name): sbxd hands out at most what it does. Matching anywhere in the name catches
 * the prefixed and suffixed spellings (OPENAI_API_KEY, DB_PASSWORD_FILE, GITHUB_TOKEN).
 */
#include <ctype.h>
#include <string.h>

#include "sbxd/secret.h"

bool secret_name(const char *name, size_t len)
{
    static const char *const marker[] = {"TOKEN", "SECRET", "PASSWORD", "PASSWD", "CRED", "KEY",
                                         "AUTH",  "BEARER", "PRIVATE",  "CERT",   "PWD"};
    char up[256];
    if (len >= sizeof(up) - 1)
        return true; /* too long to look at: withheld rather than guessed */
    for (size_t i = 0; i < len; i++)
        up[i] = (char)toupper((unsigned char)name[i]);
    up[len] = '\0';
    for (size_t i = 0; i < sizeof(marker) / sizeof(marker[0]); i++)
        if (strstr(up, marker[i]))
            return true;
    return false;
}

/* A connection string's password rides in the URL's userinfo, under any variable name
 * (DATABASE_URL=postgres://app:pw@db/…, PIP_INDEX_URL=https://user:tok@host/…). */
bool secret_url_userinfo(const char *v)
{
    for (const char *p = strstr(v, "://"); p; p = strstr(p + 3, "://")) {
        const char *auth = p + 3;
        size_t n = strcspn(auth, "/?#, \t");
        if (memchr(auth, '@', n))
            return true;
    }
    return false;
}
