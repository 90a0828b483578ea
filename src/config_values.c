/*
 * The textual values of sbxd's options (config.h): whole numbers, byte sizes and listening
 * addresses, as config.c's table and the other parsers of a size or an address read them.
 */
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>

#include "sbxd/config.h"

int config_parse_uint(const char *s, uint64_t *out)
{
    if (!s || *s < '0' || *s > '9')
        return -1;
    uint64_t v = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (*s)
        return -1;
    *out = v;
    return 0;
}

int config_parse_size(const char *s, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t mult;
    } units[] = {
        {"", 1},
        {"B", 1},
        {"K", 1ULL << 10},
        {"KiB", 1ULL << 10},
        {"KB", 1000ULL},
        {"M", 1ULL << 20},
        {"MiB", 1ULL << 20},
        {"MB", 1000000ULL},
        {"G", 1ULL << 30},
        {"GiB", 1ULL << 30},
        {"GB", 1000000000ULL},
    };
    if (!s || *s < '0' || *s > '9')
        return -1;
    const char *p = s;
    while (*p >= '0' && *p <= '9')
        p++;
    char num[32];
    if ((size_t)(p - s) >= sizeof(num))
        return -1;
    memcpy(num, s, (size_t)(p - s));
    num[p - s] = '\0';
    uint64_t v;
    if (config_parse_uint(num, &v) < 0)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(p, units[i].suffix) == 0) {
            if (v > UINT64_MAX / units[i].mult)
                return -1;
            *out = v * units[i].mult;
            return 0;
        }
    }
    return -1;
}

int config_parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256];
    const char *port;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':' || (size_t)(end - s - 1) >= sizeof(host))
            return -1;
        memcpy(host, s + 1, (size_t)(end - s - 1));
        host[end - s - 1] = '\0';
        port = end + 2;
    } else {
        const char *colon = strrchr(s, ':');
        if (!colon || (size_t)(colon - s) >= sizeof(host) || strchr(s, ':') != colon)
            return -1;
        memcpy(host, s, (size_t)(colon - s));
        host[colon - s] = '\0';
        port = colon + 1;
    }
    uint64_t p;
    if (config_parse_uint(port, &p) < 0 || p > 65535)
        return -1;
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    if (getaddrinfo(host[0] ? host : NULL, port, &hints, &res) != 0 || !res)
        return -1;
    /* ":PORT" means every interface: prefer IPv4's wildcard, as 0.0.0.0 does. */
    struct addrinfo *pick = res;
    for (struct addrinfo *ai = res; !host[0] && ai; ai = ai->ai_next)
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
    memcpy(ss, pick->ai_addr, pick->ai_addrlen);
    *len = pick->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}
