#include <limits.h>
#include <stdio.h>
#include <time.h>

#include "sbxd/timeutil.h"

static int64_t clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t time_mono_ns(void)
{
    return clock_ns(CLOCK_MONOTONIC);
}

int64_t time_real_ns(void)
{
    return clock_ns(CLOCK_REALTIME);
}

int time_ms_until(int64_t deadline_ns)
{
    if (deadline_ns == 0)
        return -1;
    int64_t left = deadline_ns - time_mono_ns();
    if (left <= 0)
        return 0;
    int64_t ms = (left + 999999) / 1000000;
    return ms > INT_MAX ? INT_MAX : (int)ms;
}

void time_seconds_text(uint64_t ms, char *buf, size_t len)
{
    unsigned long long whole = ms / 1000, frac = ms % 1000;
    int digits = 3;
    if (!frac) {
        snprintf(buf, len, "%llu.0", whole);
        return;
    }
    for (; frac % 10 == 0; frac /= 10)
        digits--;
    snprintf(buf, len, "%llu.%0*llu", whole, digits, frac);
}

void time_rfc3339(int64_t real_ns, char *buf, size_t len)
{
    time_t secs = (time_t)(real_ns / 1000000000LL);
    int ms = (int)((real_ns / 1000000LL) % 1000);
    struct tm tm;
    gmtime_r(&secs, &tm);
    snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
}

struct timespec time_after_ms(clockid_t clock, int64_t ms)
{
    struct timespec ts;
    clock_gettime(clock, &ts);
    ts.tv_sec += (time_t)(ms / 1000);
    ts.tv_nsec += (long)(ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    return ts;
}

struct timespec time_mono_timespec(int64_t mono_ns)
{
    return (struct timespec){.tv_sec = (time_t)(mono_ns / 1000000000LL),
                             .tv_nsec = (long)(mono_ns % 1000000000LL)};
}
