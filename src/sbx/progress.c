/*
 * progress.c - the progress bar of put and get: on stderr, only when stderr is a terminal
 * (never in a log or a pipe someone parses), only for transfers of 1 MiB or more, and
 * cleared when the transfer ends so that it never mixes with what follows.
 */
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "sbx.h"

static double mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void human(double bytes, char *out, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;
    while (bytes >= 1024 && u + 1 < sizeof(units) / sizeof(units[0])) {
        bytes /= 1024;
        u++;
    }
    snprintf(out, len, u ? "%.1f %s" : "%.0f %s", bytes, units[u]);
}

static int terminal_width(void)
{
    struct winsize ws;
    if (ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

void progress_init(struct progress *p, const char *label, bool enabled)
{
    memset(p, 0, sizeof(*p));
    p->label = label ? label : "";
    p->enabled = enabled && isatty(STDERR_FILENO);
    p->start_ms = mono_ms();
}

void progress_update(struct progress *p, int64_t done, int64_t total)
{
    if (!p->enabled)
        return;
    if (total > 0 ? total < SBX_PROGRESS_MIN_BYTES : done < SBX_PROGRESS_MIN_BYTES)
        return;
    double now = mono_ms();
    bool complete = total > 0 && done >= total;
    /* curl calls often, also while it waits for the answer: redraw on news only. */
    if (p->shown && (done == p->last_done || (now - p->last_ms < 100 && !complete)))
        return;
    p->last_ms = now;
    p->last_done = done;

    char have[32], all[32], rate[32];
    human((double)done, have, sizeof(have));
    double secs = (now - p->start_ms) / 1e3;
    rate[0] = '\0';
    if (secs >= 0.2) { /* before that, a rate says little */
        human((double)done / secs, rate + 2, sizeof(rate) - 4);
        memcpy(rate, "  ", 2);
        strcat(rate, "/s");
    }
    char tail[128];
    if (total > 0) {
        human((double)total, all, sizeof(all));
        snprintf(tail, sizeof(tail), " %3d%% %s / %s%s", (int)(done * 100 / total), have, all,
                 rate);
    } else {
        snprintf(tail, sizeof(tail), " %s%s", have, rate);
    }

    /* label [=====>    ] tail, fitted to the terminal's width. */
    int width = terminal_width() - 1, tlen = (int)strlen(tail);
    int label_len = (int)strlen(p->label);
    if (label_len > width / 3)
        label_len = width / 3;
    int bar = total > 0 ? width - label_len - tlen - 4 : 0;
    char line[1024];
    int n = snprintf(line, sizeof(line), "\r%.*s", label_len, p->label);
    if (bar >= 10 && bar < 600) {
        int fill = (int)((double)bar * (double)done / (double)total);
        line[n++] = ' ';
        line[n++] = '[';
        for (int i = 0; i < bar; i++)
            line[n++] = i < fill ? '=' : i == fill ? '>' : ' ';
        line[n++] = ']';
    }
    snprintf(line + n, sizeof(line) - (size_t)n, "%s\033[K", tail);
    /* One write per redraw: no flicker, and a failed write to a terminal is not worth an
     * error. */
    if (write_all(STDERR_FILENO, line, strlen(line)) == 0)
        p->shown = true;
}

void progress_end(struct progress *p)
{
    if (p->shown)
        (void)write_all(STDERR_FILENO, "\r\033[K", 4);
    p->shown = false;
}
