/*
 * http_files_internal.h - what the faces of the file API share on the HTTP side (route_files.c for
 * /files and /v1/files, route_legacy_files.c for the python-runtime routes): a file's bytes
 * sent from its fd (files_send.c), a directory's listing streamed (files_list.c), a body
 * streamed into a file (files_upload.c), a directory's changes streamed (files_watch.c).
 * The filesystem side is files.h. Only the file routes include it.
 */
#ifndef SBXD_HTTP_FILES_INTERNAL_H
#define SBXD_HTTP_FILES_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "sbxd/archive.h"
#include "sbxd/files.h"
#include "http_internal.h"
#include "sbxd/jsonw.h"
#include "multipart_internal.h"

/* A percent-decoded copy of s (malloc'd), or NULL with err (a bad escape, a NUL). */
char *files_url_decode(const char *s, struct sbxd_err *err);

/* The command user file operations run as (files.h). */
void files_user(const struct server *srv, struct fs_user *u);

/* Answer with the bytes of the open regular file fd (consumed) of stat st: ETag,
 * Last-Modified, a single Range (206, or 416). attachment: the Content-Disposition filename
 * (the legacy download), or NULL for none. */
enum MHD_Result files_send(struct MHD_Connection *c, int fd, const struct stat *st,
                           const char *attachment);

/* Where a listed entry lies, for a face that looks further (to follow symlinks): the
 * workspace root, the listed directory's fd and its path (relative to the root). */
struct listing_at {
    int rootfd;
    int dirfd;
    const char *path;
};

/* How a face lists a directory. */
struct listing_form {
    int list_flags; /* FS_LIST_*: FS_LIST_SORTED for /files and /v1 */
    bool envelope;  /* {"path","entries":[…],"total"} (offset and limit apply), else [ … ] */
    /* Write one entry (e may be rewritten first), or nothing: false leaves it out (a link a
     * face does not list). Runs with the user's rights. */
    bool (*entry)(struct jsonw *w, struct fs_entry *e, const struct listing_at *at);
    /* The answer when the directory cannot be listed at all. */
    enum MHD_Result (*fail)(struct MHD_Connection *c, const struct sbxd_err *err);
};

/* Answer 200 with the listing of the open directory fd (consumed) at path, as form says,
 * the names offset to offset+limit of the directory (an entry the form leaves out counts as
 * one: pages follow on with offset += limit, and "total" counts every name). shown is the
 * envelope's "path" (NULL: path). The JSON is made a chunk at a time as libmicrohttpd asks
 * for it, in memory bounded whatever the directory holds. */
enum MHD_Result files_list_send(struct server *srv, struct MHD_Connection *c, int fd,
                                const char *path, const char *shown,
                                const struct listing_form *form, uint64_t offset, uint64_t limit);

/* One upload in progress: its target, its temporary file, and how its body is read. Made by
 * the route's begin (files_put_new), fed by route_files_body, freed with the request. */
struct files_put {
    struct server *srv;
    char *path;
    bool directory; /* PUT ?type=directory */
    mode_t mode;
    struct fs_upload up;
    bool began; /* the temporary file exists */
    bool multipart;
    struct multipart mp;
    uint64_t received;     /* body bytes read */
    bool no_replace;       /* If-None-Match: * */
    char if_match[512];    /* If-Match ("": none) */
    struct sbxd_err error; /* the first failure; the rest of the body is then dropped */
    struct ar_extract *ax; /* PUT ?archive=: the extraction the body goes to */
    bool ax_failed;        /* it ended early (the rest of the body is dropped) */
    bool archive_existed;  /* the directory was there (200, else 201) */
    double t0;
};

/* A new upload kept as rc's state (its temporary file removed unless committed), mode the
 * user's default for a file; NULL when out of memory. */
struct files_put *files_put_new(struct server *srv, struct req_ctx *rc);

/* Begin the temporary file of p->path, with the user's rights. 0, or -1 with err. */
int files_put_open(struct files_put *p, struct sbxd_err *err);

/* Append a piece of the content (an mp_data_fn): 0, or -1 with p->error. */
int files_put_data(void *arg, const char *data, size_t n);

/* The multipart body is complete and had its part "file": 0, or -1 with p->error. */
int files_put_finish_multipart(struct files_put *p);

/* fsync and rename the temporary file over the target, with p->mode: 0 (st the result,
 * counted in /metrics), or -1 with err (the target intact). */
int files_put_commit(struct files_put *p, struct stat *st, struct sbxd_err *err);

/* "files", "directories", "symlinks" and "bytes" of a tree copied or extracted, into an open
 * object (route_files.c). */
void files_write_counts(struct jsonw *w, uint64_t files, uint64_t directories, uint64_t symlinks,
                        uint64_t bytes);

/* A whole-number query argument into *n (left alone when absent): false when malformed
 * (route_files.c). */
bool files_query_uint(struct MHD_Connection *c, const char *key, uint64_t *n);

/* A true/false query argument into *v (left alone when absent): false when malformed
 * (route_files.c). */
bool files_query_bool(struct MHD_Connection *c, const char *key, bool *v);

/* GET ?watch=true[&recursive=true][&since=OFFSET]: the directory path's changes, as they
 * come (files_watch.c). */
enum MHD_Result files_watch_get(struct server *srv, struct MHD_Connection *c, const char *path);

/* GET ?grep=PATTERN (content search) or ?glob=GLOBS (name search) of the directory path,
 * streamed (files_search.c). */
enum MHD_Result files_search_get(struct server *srv, struct MHD_Connection *c, const char *path);
/* ---- line ranges and exact edits (files_edit.c) ---- */

/* Whether the query names key, with a value or none ("?edit"). */
bool files_query_has(struct MHD_Connection *c, const char *key);
/* GET ?lines=SPEC[&numbers=true]: lines of the file path, streamed, with its ETag. */
enum MHD_Result files_lines_get(struct server *srv, struct MHD_Connection *c, const char *path,
                                const char *spec);
/* POST ?edit: checks of the head (a JSON body within --max-body-bytes); MHD_YES for any other
 * POST. */
enum MHD_Result files_edit_begin(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc);
/* A piece of a POST ?edit's body, kept in rc->body; another POST's body is dropped. */
enum MHD_Result files_edit_body(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                const char *data, size_t n);
/* POST ?edit: the edits of the body applied to path; the new ETag and the lines changed. */
enum MHD_Result files_edit_post(struct server *srv, struct MHD_Connection *c, struct req_ctx *rc,
                                const char *path);

/* ---- archives (files_archive.c) ---- */

/* ?archive= as a format: 0, or -1 for a value that is not tar or zip. */
int files_archive_format(const char *v, enum ar_format *fmt);

/* GET ?archive=: the directory path packed as fmt, streamed as it is made. */
enum MHD_Result files_archive_get(struct server *srv, struct MHD_Connection *c, const char *path,
                                  enum ar_format fmt);

/* PUT ?archive=: begin extracting into p->path (replace: the directory becomes the archive's
 * tree). 0, or -1 with err. */
int files_archive_begin(struct files_put *p, bool replace, struct sbxd_err *err);

/* A piece of the body, to the extraction. */
void files_archive_feed(struct files_put *p, const char *data, size_t n);

/* The body is whole: the extraction's answer. */
enum MHD_Result files_archive_end(struct MHD_Connection *c, struct files_put *p);

/* The request ends without its answer (the client went away): the extraction is abandoned,
 * nothing of it left. */
void files_archive_abandon(struct files_put *p);

#endif
