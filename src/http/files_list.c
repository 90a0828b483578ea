/*
 * A directory listing being sent, for every face of the file API. Its JSON is made a chunk at
 * a time, as libmicrohttpd asks for more, from a lister that reads the directory as it goes
 * (fs/files.c): what one listing holds is bounded (SBXD_LIST_*) whatever the directory
 * holds, and a slow client slows the reading rather than growing sbxd.
 *
 * The status is sent before the entries: the directory is opened and its first names are read
 * before the answer starts, so a directory that cannot be listed is still an error status.
 * Only a read failing later (an I/O error half-way) can cut a listing short; it then ends as
 * valid JSON with the entries read ("total" counting those), and the cut is logged.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "http_files_internal.h"
#include "http_internal.h"
#include "sbxd/log.h"
#include "sbxd/resolve.h"

enum listing_stage { LIST_SKIP, LIST_ENTRIES, LIST_COUNT, LIST_TAIL, LIST_DONE };

/* Names passed over (an offset, or counted after a page) per fill: one fill stays short. */
#define LIST_SKIP_BATCH 4096

struct listing {
    struct server *srv;
    struct fs_lister *l;
    const struct listing_form *form;
    char *path;                  /* the listed path, decoded, relative to the root */
    char *shown;                 /* the envelope's "path" */
    uint64_t offset, limit;      /* the page asked for (an envelope's) */
    uint64_t passed, sent, rest; /* entries before the page, in it, after it */
    uint64_t omitted;            /* names in the page the form left out */
    enum listing_stage stage;
    struct jsonw out; /* the chunk being sent */
    size_t off;       /* ... and how much of it went out */
};

static void listing_cut(struct listing *ls, const struct sbxd_err *err)
{
    LOG_EVENT("warn", "listing_cut", LOG_S("path", ls->path), LOG_S("error", err->msg),
              LOG_I("entries", ls->sent),
              LOG_I("read", ls->passed + ls->sent + ls->omitted + ls->rest));
    ls->stage = LIST_TAIL;
}

/* The next entry of the page into the chunk, or the stage after the page. */
static void listing_entry(struct listing *ls, struct sbxd_err *err)
{
    if (ls->sent + ls->omitted == ls->limit) {
        ls->stage = LIST_COUNT;
        return;
    }
    struct fs_entry e;
    int r = fs_list_next(ls->l, &e, err);
    if (r < 0) {
        listing_cut(ls, err);
    } else if (r == 0) {
        ls->stage = LIST_TAIL;
    } else {
        struct listing_at at = {ls->srv->sb->rootfd, fs_list_dirfd(ls->l), ls->path};
        if (ls->form->entry(&ls->out, &e, &at))
            ls->sent++;
        else
            ls->omitted++;
    }
}

static void listing_tail(struct listing *ls)
{
    jw_arr_end(&ls->out);
    if (ls->form->envelope) {
        jw_key(&ls->out, "total");
        jw_uint(&ls->out, ls->passed + ls->sent + ls->omitted + ls->rest);
        jw_obj_end(&ls->out);
    }
    jw_newline(&ls->out);
    ls->stage = LIST_DONE;
}

/* Make the next chunk of the listing in ls->out, with the user's rights. */
static void listing_fill(struct listing *ls)
{
    struct sbxd_err err = {0};
    struct fs_user u;
    files_user(ls->srv, &u);
    fs_user_enter(&u);
    while (ls->out.len < SBXD_LIST_CHUNK && ls->stage != LIST_DONE) {
        uint64_t k;
        int r;
        switch (ls->stage) {
        case LIST_SKIP:
            k = ls->offset - ls->passed;
            r = fs_list_skip(ls->l, k < LIST_SKIP_BATCH ? k : LIST_SKIP_BATCH, &k, &err);
            ls->passed += k;
            if (r < 0)
                listing_cut(ls, &err);
            else if (ls->passed == ls->offset || k == 0)
                ls->stage = LIST_ENTRIES;
            break;
        case LIST_ENTRIES:
            listing_entry(ls, &err);
            break;
        case LIST_COUNT:
            /* "total" counts the whole directory: the names after the page, not described. */
            r = fs_list_skip(ls->l, LIST_SKIP_BATCH, &k, &err);
            ls->rest += k;
            if (r < 0)
                listing_cut(ls, &err);
            else if (k < LIST_SKIP_BATCH)
                ls->stage = LIST_TAIL;
            break;
        case LIST_TAIL:
            listing_tail(ls);
            break;
        case LIST_DONE:
            break;
        }
    }
    fs_user_leave(&u);
}

static bool listing_more(void *cls)
{
    struct listing *ls = cls;
    if (ls->stage == LIST_DONE)
        return false;
    listing_fill(ls);
    return true;
}

static ssize_t listing_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct listing *ls = cls;
    return http_stream_pieces(&ls->out, &ls->off, listing_more, ls, buf, max);
}

static void listing_free(void *cls)
{
    struct listing *ls = cls;
    fs_list_close(ls->l);
    jw_free(&ls->out);
    free(ls->path);
    free(ls->shown);
    free(ls);
}

/* The listing's first bytes: the envelope's opening, or the array's. */
static void listing_head(struct listing *ls)
{
    if (!ls->form->envelope) {
        jw_arr_begin(&ls->out);
        return;
    }
    jw_obj_begin(&ls->out);
    jw_key(&ls->out, "path");
    jw_str(&ls->out, ls->shown);
    jw_key(&ls->out, "entries");
    jw_arr_begin(&ls->out);
}

enum MHD_Result files_list_send(struct server *srv, struct MHD_Connection *c, int fd,
                                const char *path, const char *shown,
                                const struct listing_form *form, uint64_t offset, uint64_t limit)
{
    struct sbxd_err err = {0};
    struct listing *ls = calloc(1, sizeof(*ls));
    if (ls) {
        ls->path = strdup(path);
        ls->shown = strdup(shown ? shown : path);
    }
    if (!ls || !ls->path || !ls->shown) {
        close(fd);
        if (ls) {
            free(ls->path);
            free(ls->shown);
        }
        free(ls);
        return MHD_NO;
    }
    ls->srv = srv;
    ls->form = form;
    ls->offset = offset;
    ls->limit = limit;
    ls->stage = offset ? LIST_SKIP : LIST_ENTRIES;
    struct fs_user u;
    files_user(srv, &u);
    fs_user_enter(&u);
    ls->l = fs_list_open(fd, form->list_flags, &err);
    fs_user_leave(&u);
    if (!ls->l) {
        listing_free(ls);
        return form->fail(c, &err);
    }
    /* Room for a chunk and the largest entry after it (a name of 255 bytes, each escaped to
     * 6): the buffer never grows while the listing is sent. */
    jw_init(&ls->out, SBXD_LIST_CHUNK + 4096);
    listing_head(ls);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, SBXD_LIST_CHUNK,
                                                               listing_read, ls, listing_free);
    if (!r) {
        listing_free(ls);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    enum MHD_Result ret = http_queue(c, MHD_HTTP_OK, r, 0);
    MHD_destroy_response(r);
    return ret;
}
