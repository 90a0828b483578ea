/*
 * fuzz_edit - an edit request's decoder (src/fs/edit_parse.c) and the edits applied in memory
 * (fs_edit_apply, src/fs/edit.c), against a plain reference.
 *
 * Input: the JSON body, a NUL byte, then the text the edits apply to. A body the decoder
 * refuses must leave nothing to free and say why. One it accepts must give 1 to
 * SBXD_EDIT_MAX_EDITS edits, none with an empty old text; applied, they must give the same
 * bytes and count as the reference (each edit in turn: its old text counted without
 * overlaps, refused when missing, or found twice without replace_all), and changed lines
 * that are sorted, apart, and within the result's lines.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "sbxd/edit.h"
#include "sbxd/fs_limits.h"

#include "fuzz.h"

/* The reference: edit e applied to *t (a malloc'd buffer of *n bytes). */
static enum sbxd_errkind ref_apply(char **t, size_t *n, const struct fs_edit *e, uint64_t *count)
{
    uint64_t k = 0;
    for (size_t i = 0; i + e->old_len <= *n;) {
        if (memcmp(*t + i, e->old_text, e->old_len) == 0) {
            k++;
            i += e->old_len;
        } else {
            i++;
        }
    }
    if (k == 0)
        return SBXD_E_NOT_FOUND;
    if (k > 1 && !e->replace_all)
        return SBXD_E_CONFLICT;
    size_t cap = *n + (size_t)k * e->new_len + 1, m = 0;
    char *o = malloc(cap);
    check(o != NULL);
    for (size_t i = 0; i < *n;) {
        if (i + e->old_len <= *n && memcmp(*t + i, e->old_text, e->old_len) == 0) {
            memcpy(o + m, e->new_text, e->new_len);
            m += e->new_len;
            i += e->old_len;
        } else {
            o[m++] = (*t)[i++];
        }
    }
    free(*t);
    *t = o;
    *n = m;
    *count += k;
    return SBXD_E_NONE;
}

static uint64_t count_lines(const char *t, size_t n)
{
    uint64_t lines = 0;
    for (size_t i = 0; i < n; i++)
        lines += t[i] == '\n';
    return lines + (n && t[n - 1] != '\n');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "";
    size_t tlen = nul ? size - jlen - 1 : 0;
    cJSON *req = cJSON_ParseWithLength((const char *)data, jlen);
    struct fs_edit *edits = (struct fs_edit *)1;
    size_t n = 99;
    struct sbxd_err err = {0};
    int rc = fs_edit_parse(req, NULL, &edits, &n, &err);
    if (rc < 0) {
        check(edits == NULL && n == 0);
        check(err.kind != SBXD_E_NONE && err.msg[0]);
        cJSON_Delete(req);
        return 0;
    }
    check(edits != NULL && n >= 1 && n <= SBXD_EDIT_MAX_EDITS);
    uint64_t grow = 0;
    for (size_t i = 0; i < n; i++) {
        check(edits[i].old_len > 0 && edits[i].old_text && edits[i].new_text);
        grow += edits[i].new_len;
    }
    /* The reference's worst case is every byte replaced by every new text: kept small. */
    char *ref = malloc(tlen + 1);
    check(ref != NULL);
    memcpy(ref, text, tlen);
    size_t rlen = tlen;
    uint64_t rcount = 0;
    enum sbxd_errkind want = SBXD_E_NONE;
    bool small = grow * (tlen + 1) < (1u << 22);
    for (size_t i = 0; small && i < n && want == SBXD_E_NONE; i++)
        want = ref_apply(&ref, &rlen, &edits[i], &rcount);
    char *out;
    size_t olen;
    struct fs_edit_result res;
    struct sbxd_err aerr = {0};
    rc = fs_edit_apply(text, tlen, edits, n, "f", &out, &olen, &res, &aerr);
    if (small && want != SBXD_E_NONE) {
        check(rc < 0 && aerr.kind == want && out == NULL);
    } else if (small && rlen <= SBXD_EDIT_MAX_BYTES) {
        check(rc == 0);
        check(olen == rlen && memcmp(out, ref, rlen) == 0 && res.replaced == rcount);
    }
    if (rc == 0) {
        uint64_t lines = count_lines(out, olen);
        uint64_t prev = 0;
        for (size_t i = 0; i < res.nspans; i++) {
            check(res.spans[i].first >= 1 && res.spans[i].first <= res.spans[i].last);
            check(res.spans[i].last <= (lines ? lines : 1));
            check(i == 0 || res.spans[i].first > prev + 1);
            prev = res.spans[i].last;
        }
        check(res.spans_cut || res.nspans >= 1);
        check(res.nspans <= SBXD_EDIT_MAX_SPANS);
        fs_edit_result_free(&res);
        free(out);
    }
    free(ref);
    free(edits);
    cJSON_Delete(req);
    return 0;
}
