/* UTF-8 sanitizing, the JSON writer and base64. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbxd/base64.h"
#include "sbxd/err.h"
#include "sbxd/jsonw.h"
#include "sbxd/timeutil.h"
#include "sbxd/utf8.h"
#include "suites.h"

static char *utf8_json(const char *s, size_t n, bool cut)
{
    struct jsonw w;
    jw_init(&w, 0);
    jw_str_utf8(&w, s, n, cut);
    return jw_finish(&w, NULL);
}

#define FFFD "\xEF\xBF\xBD"

START_TEST(decode_rules)
{
    ck_assert_int_eq(utf8_decode((const uint8_t *)"a", 1), 1);
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xC3\xA9", 2), 2);
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xE2\x82\xAC", 3), 3);
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xF0\x9F\x98\x80", 4), 4);
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\x80", 1), -1);         /* lone continuation */
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xC0\xAF", 2), -1);     /* overlong */
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xE0\x80\x80", 3), -1); /* overlong */
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xED\xA0\x80", 3), -1); /* surrogate */
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xF4\x90\x80\x80", 4), -1); /* > U+10FFFF */
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xE2\x82"
                                                  "A",
                                 3),
                     -2);                                             /* maximal subpart */
    ck_assert_int_eq(utf8_decode((const uint8_t *)"\xE2\x82", 2), 0); /* cut off */
}
END_TEST

/* The offset utf8_valid should give: where decoding the bytes one sequence at a time first
 * fails (the decoder's verdict, the reference). */
static size_t first_invalid_by_decoder(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        int k = utf8_decode(s + i, n - i);
        if (k <= 0)
            return i;
        i += (size_t)k;
    }
    return n;
}

#define VALID(lit) utf8_valid((const uint8_t *)(lit), sizeof(lit) - 1)

START_TEST(validate_rules)
{
    ck_assert_uint_eq(utf8_valid(NULL, 0), 0);
    ck_assert_uint_eq(VALID("plain ascii, longer than one word"), 33);
    ck_assert_uint_eq(VALID("\xC3\xA9\xE6\x97\xA5\xE6\x9C\xAC\xF0\x9F\x98\x80"),
                      12);                                      /* U+E9 U+65E5 U+672C U+1F600 */
    ck_assert_uint_eq(VALID("\xF4\x8F\xBF\xBF"), 4);            /* U+10FFFF, the last */
    ck_assert_uint_eq(VALID("\xEF\xBF\xBF"), 3);                /* U+FFFF */
    ck_assert_uint_eq(VALID("{\"command\":\"\xFF\xFE\"}"), 12); /* the body */
    ck_assert_uint_eq(VALID("abc\x80"), 3);                     /* stray continuation */
    ck_assert_uint_eq(VALID("ab\xC0\xAF"), 2);                  /* overlong '/' */
    ck_assert_uint_eq(VALID("ab\xC1\xBF"), 2);                  /* overlong (C1) */
    ck_assert_uint_eq(VALID("a\xE0\x80\xAF"), 1);               /* overlong, 3 bytes */
    ck_assert_uint_eq(VALID("a\xF0\x80\x80\xAF"), 1);           /* overlong, 4 bytes */
    ck_assert_uint_eq(VALID("12345678\xED\xA0\x80"), 8);        /* U+D800 */
    ck_assert_uint_eq(VALID("12345678\xED\xBF\xBF"), 8);        /* U+DFFF */
    ck_assert_uint_eq(VALID("\xF4\x90\x80\x80"), 0);            /* U+110000 */
    ck_assert_uint_eq(VALID("x\xF5\x80\x80\x80"), 1);           /* F5..FF never */
    ck_assert_uint_eq(VALID("x\xF8\x88\x80\x80\x80"), 1);       /* 5-byte form */
    ck_assert_uint_eq(VALID("123456789\xFF"), 9);
    ck_assert_uint_eq(VALID("\xE2\x82"
                            "A"),
                      0);                            /* cut inside */
    ck_assert_uint_eq(VALID("abcdefgh\xE2\x82"), 8); /* cut by the end */
    ck_assert_uint_eq(VALID("\xF0\x9F\x98"), 0);
}
END_TEST

/* The validator agrees with the decoder on every non-ASCII byte followed by every byte,
 * behind ASCII prefixes of each length around the 8-byte words; and for the leads of 3- and
 * 4-byte forms, on a sample of the bytes that decide (each range's edges). */
/* (a check that records nothing when it holds: Check's own assertions each write to the runner
 * in fork mode, and these are millions, which on a busy machine ran past the timeout) */
#define AGREE(buf, n)                                                                              \
    do {                                                                                           \
        size_t v_ = utf8_valid((buf), (n)), d_ = first_invalid_by_decoder((buf), (n));             \
        if (v_ != d_)                                                                              \
            ck_abort_msg("utf8_valid says %zu, the decoder %zu, for %zu bytes", v_, d_,            \
                         (size_t)(n));                                                             \
    } while (0)

START_TEST(validate_agrees_with_decoder)
{
    uint8_t buf[32];
    static const uint8_t last[] = {0x00, 0x41, 0x7F, 0x80, 0x8F, 0x90, 0x9F, 0xA0, 0xBF,
                                   0xC0, 0xC2, 0xDF, 0xE0, 0xED, 0xF0, 0xF4, 0xF5, 0xFF};
    for (size_t pre = 0; pre <= 17; pre += 1) {
        memset(buf, 'a', pre);
        for (unsigned a = 0x80; a < 0x100; a++) {
            buf[pre] = (uint8_t)a;
            AGREE(buf, pre + 1);
            for (unsigned b = 0; b < 0x100; b++) {
                buf[pre + 1] = (uint8_t)b;
                AGREE(buf, pre + 2);
                if (a < 0xE0 || pre % 8 != 1 || !memchr(last, (int)b, sizeof(last)))
                    continue; /* longer forms: their leads, at fewer prefixes and edges */
                for (size_t c = 0; c < sizeof(last); c++) {
                    buf[pre + 2] = last[c];
                    AGREE(buf, pre + 3);
                    for (size_t d = 0; d < sizeof(last); d++) {
                        buf[pre + 3] = last[d];
                        buf[pre + 4] = 'z';
                        AGREE(buf, pre + 5);
                    }
                }
            }
        }
    }
}
END_TEST

START_TEST(sanitize)
{
    uint8_t out[64];
    size_t n = utf8_sanitize((const uint8_t *)"a\xFF"
                                              "b\xE2\x82"
                                              "c",
                             6, out);
    ck_assert_uint_eq(n, 9);
    ck_assert_mem_eq(out, "a" FFFD "b" FFFD "c", 9);
}
END_TEST

START_TEST(json_strings)
{
    char *s = utf8_json("a\"b\\c\n\x01\0z", 9, false);
    ck_assert_str_eq(s, "\"a\\\"b\\\\c\\n\\u0001\\u0000z\"");
    free(s);
    s = utf8_json("x\xFFy", 3, false);
    ck_assert_str_eq(s, "\"x" FFFD "y\"");
    free(s);
    /* A character cut by the output cap is dropped, not replaced ... */
    s = utf8_json("ab\xE2\x82", 4, true);
    ck_assert_str_eq(s, "\"ab\"");
    free(s);
    /* ... but a truncated character at a real end of output is invalid data. */
    s = utf8_json("ab\xE2\x82", 4, false);
    ck_assert_str_eq(s, "\"ab" FFFD "\"");
    free(s);
    /* An empty stream has no buffer at all. */
    s = utf8_json(NULL, 0, false);
    ck_assert_str_eq(s, "\"\"");
    free(s);
    s = utf8_json("\xE2\x82\xAC", 3, false);
    ck_assert_str_eq(s, "\"\xE2\x82\xAC\"");
    free(s);
}
END_TEST

/* Every ASCII byte at every position of a string longer than the 8-byte blocks the encoder
 * checks at once: each comes out as JSON would have it (escaped exactly when it must be). */
START_TEST(json_every_ascii_byte_at_every_position)
{
    for (int c = 0; c < 0x80; c++) {
        for (size_t pos = 0; pos < 24; pos++) {
            char in[25];
            memset(in, 'a', 24);
            in[24] = '\0';
            in[pos] = (char)c;
            struct jsonw w;
            jw_init(&w, 16);
            jw_str_utf8(&w, in, 24, false);
            size_t len;
            char *out = jw_finish(&w, &len);
            char want[200];
            size_t k = 0;
            want[k++] = '"';
            for (size_t i = 0; i < 24; i++) {
                unsigned char b = (unsigned char)in[i];
                if (b == '"' || b == '\\') {
                    want[k++] = '\\';
                    want[k++] = (char)b;
                } else if (b >= 0x20) {
                    want[k++] = (char)b;
                } else {
                    const char *e = b == '\n'   ? "\\n"
                                    : b == '\r' ? "\\r"
                                    : b == '\t' ? "\\t"
                                    : b == '\b' ? "\\b"
                                    : b == '\f' ? "\\f"
                                                : NULL;
                    if (e) {
                        memcpy(want + k, e, 2);
                        k += 2;
                    } else {
                        k += (size_t)snprintf(want + k, sizeof(want) - k, "\\u%04x", b);
                    }
                }
            }
            want[k++] = '"';
            ck_assert_uint_eq(len, k);
            ck_assert_msg(memcmp(out, want, k) == 0, "byte 0x%02x at %zu: %.*s", c, pos, (int)len,
                          out);
            free(out);
        }
    }
}
END_TEST

START_TEST(json_structure)
{
    struct jsonw w;
    jw_init(&w, 4);
    jw_obj_begin(&w);
    jw_key(&w, "a");
    jw_int(&w, -3);
    jw_key(&w, "b");
    jw_arr_begin(&w);
    jw_bool(&w, true);
    jw_null(&w);
    jw_double(&w, 1.5, 2);
    jw_uint(&w, 18446744073709551615ULL);
    jw_arr_end(&w);
    jw_key(&w, "c");
    jw_str(&w, NULL);
    jw_key(&w, "d");
    jw_base64(&w, "\xFF\x00", 2);
    jw_obj_end(&w);
    size_t len;
    char *s = jw_finish(&w, &len);
    ck_assert_str_eq(s, "{\"a\":-3,\"b\":[true,null,1.50,18446744073709551615],\"c\":null,"
                        "\"d\":\"/wA=\"}");
    ck_assert_uint_eq(len, strlen(s));
    free(s);
}
END_TEST

/* Seconds as Python prints a float: the words of a timeout in the python runtime's message. */
START_TEST(seconds_as_python_writes_them)
{
    static const struct {
        uint64_t ms;
        const char *text;
    } cases[] = {{300000, "300.0"}, {500, "0.5"}, {1000, "1.0"}, {1250, "1.25"},
                 {1, "0.001"},      {10, "0.01"}, {0, "0.0"},    {604800000, "604800.0"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char buf[32];
        time_seconds_text(cases[i].ms, buf, sizeof(buf));
        ck_assert_str_eq(buf, cases[i].text);
    }
}
END_TEST

START_TEST(base64_roundtrip)
{
    static const char *vec[][2] = {{"", ""},
                                   {"f", "Zg=="},
                                   {"fo", "Zm8="},
                                   {"foo", "Zm9v"},
                                   {"foob", "Zm9vYg=="},
                                   {"fooba", "Zm9vYmE="},
                                   {"foobar", "Zm9vYmFy"}};
    for (size_t i = 0; i < sizeof(vec) / sizeof(vec[0]); i++) {
        char enc[32];
        size_t n = base64_encode(vec[i][0], strlen(vec[i][0]), enc);
        ck_assert_uint_eq(n, base64_encoded_len(strlen(vec[i][0])));
        enc[n] = '\0';
        ck_assert_str_eq(enc, vec[i][1]);
        char dec[32];
        long d = base64_decode(enc, n, dec);
        ck_assert_int_eq(d, (long)strlen(vec[i][0]));
        ck_assert_mem_eq(dec, vec[i][0], (size_t)d);
    }
    char dec[8];
    ck_assert_int_eq(base64_decode("Zm9", 3, dec), -1);
    ck_assert_int_eq(base64_decode("Z=9v", 4, dec), -1);
    ck_assert_int_eq(base64_decode("Zm9*", 4, dec), -1);
}
END_TEST

/* sbxd_err_wrap puts a context before the message and keeps what the error is; a message
 * that no longer fits is cut as any other. */
START_TEST(err_wrap_keeps_the_error)
{
    struct sbxd_err e = {0};
    sbxd_fail(&e, SBXD_E_CONFLICT, 17, "in use");
    e.flags = SBXD_EF_ENDED;
    ck_assert_int_eq(sbxd_err_wrap(&e, "--%s: ", "flag"), -1);
    ck_assert_str_eq(e.msg, "--flag: in use");
    ck_assert_int_eq(e.kind, SBXD_E_CONFLICT);
    ck_assert_int_eq(e.sys_errno, 17);
    ck_assert_uint_eq(e.flags, SBXD_EF_ENDED);
    memset(e.msg, 'x', sizeof(e.msg) - 1);
    e.msg[sizeof(e.msg) - 1] = '\0';
    sbxd_err_wrap(&e, "ctx: ");
    ck_assert_uint_eq(strlen(e.msg), sizeof(e.msg) - 1);
    ck_assert(strncmp(e.msg, "ctx: xxx", 8) == 0);
    ck_assert_int_eq(sbxd_err_wrap(NULL, "ctx: "), -1);
}
END_TEST

Suite *text_suite(void)
{
    Suite *s = suite_create("text");
    TCase *tc = tcase_create("utf8-json-base64");
    tcase_add_test(tc, decode_rules);
    tcase_add_test(tc, validate_rules);
    tcase_add_test(tc, validate_agrees_with_decoder);
    tcase_add_test(tc, sanitize);
    tcase_add_test(tc, json_strings);
    tcase_add_test(tc, json_every_ascii_byte_at_every_position);
    tcase_add_test(tc, json_structure);
    tcase_add_test(tc, base64_roundtrip);
    tcase_add_test(tc, seconds_as_python_writes_them);
    tcase_add_test(tc, err_wrap_keeps_the_error);
    suite_add_tcase(s, tc);
    return s;
}
