/* The bearer token: loading (and wiping) it, and the comparison. */
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sbxd/auth.h"
#include "suites.h"

START_TEST(check_accepts_only_the_token)
{
    const char *t = "abc123";
    ck_assert(auth_check(t, 6, "Bearer abc123"));
    ck_assert(auth_check(t, 6, "bearer abc123"));
    ck_assert(auth_check(t, 6, "BEARER  abc123 "));
    ck_assert(!auth_check(t, 6, NULL));
    ck_assert(!auth_check(t, 6, ""));
    ck_assert(!auth_check(t, 6, "Bearer"));
    ck_assert(!auth_check(t, 6, "Bearer "));
    ck_assert(!auth_check(t, 6, "Bearer abc12"));
    ck_assert(!auth_check(t, 6, "Bearer abc1234"));
    ck_assert(!auth_check(t, 6, "Bearer abc124"));
    ck_assert(!auth_check(t, 6, "Bearer xbc123"));
    ck_assert(!auth_check(t, 6, "Basic abc123"));
    ck_assert(!auth_check(t, 6, "abc123"));
    /* A NUL cannot end a guess early: the header's length is what it is. */
    ck_assert(!auth_check(t, 6, "Bearer abc"));
}
END_TEST

START_TEST(load_from_the_environment_wipes_it)
{
    char e0[] = "PATH=/bin", e1[] = "SBXD_TOKEN=s3cret", e2[] = "HOME=/";
    char *envp[] = {e0, e1, e2, NULL};
    char tok[64];
    struct sbxd_err why = {0};
    ck_assert_int_eq(auth_load("", envp, tok, sizeof(tok), &why), 0);
    ck_assert_str_eq(tok, "s3cret");
    /* The entry is gone from envp, and its bytes (what /proc/PID/environ shows) are zeros. */
    ck_assert_str_eq(envp[0], "PATH=/bin");
    ck_assert_str_eq(envp[1], "HOME=/");
    ck_assert_ptr_null(envp[2]);
    for (size_t i = 0; i < sizeof(e1) - 1; i++)
        ck_assert_int_eq(e1[i], 0);
}
END_TEST

START_TEST(load_from_a_file)
{
    char path[] = "/tmp/sbxd-unit-token-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "t0ken\r\n", 7), 7);
    close(fd);
    char *envp[] = {NULL};
    char tok[64];
    struct sbxd_err why = {0};
    ck_assert_int_eq(auth_load(path, envp, tok, sizeof(tok), &why), 0);
    ck_assert_str_eq(tok, "t0ken");
    /* Both: refused, and the variable is still wiped. */
    char e1[] = "SBXD_TOKEN=x";
    char *envp2[] = {e1, NULL};
    ck_assert_int_eq(auth_load(path, envp2, tok, sizeof(tok), &why), -1);
    ck_assert_ptr_nonnull(strstr(why.msg, "use one"));
    ck_assert_ptr_null(envp2[0]);
    ck_assert_str_eq(tok, "");
    unlink(path);
    ck_assert_int_eq(auth_load(path, envp, tok, sizeof(tok), &why), -1);
    ck_assert_ptr_nonnull(strstr(why.msg, "cannot open"));
    ck_assert_ptr_eq(strstr(why.msg, "--token-file: cannot open '"), why.msg);
}
END_TEST

START_TEST(load_refuses_unusable_tokens)
{
    char tok[16];
    struct sbxd_err why = {0};
    char e1[] = "SBXD_TOKEN=has space";
    char *envp1[] = {e1, NULL};
    ck_assert_int_eq(auth_load(NULL, envp1, tok, sizeof(tok), &why), -1);
    char e2[] = "SBXD_TOKEN=";
    char *envp2[] = {e2, NULL};
    ck_assert_int_eq(auth_load(NULL, envp2, tok, sizeof(tok), &why), -1);
    char e3[] = "SBXD_TOKEN=0123456789abcdefXYZ"; /* longer than tok can hold */
    char *envp3[] = {e3, NULL};
    ck_assert_int_eq(auth_load(NULL, envp3, tok, sizeof(tok), &why), -1);
    char *none[] = {NULL};
    ck_assert_int_eq(auth_load(NULL, none, tok, sizeof(tok), &why), 0);
    ck_assert_str_eq(tok, "");
}
END_TEST

/* Whether commands could read the token file: each identity tried with its own credentials,
 * so mode, owner, group and the directories on the way all count. */
START_TEST(token_file_exposure)
{
    char dir[] = "/tmp/sbxd-unit-tokdir-XXXXXX", path[64], why[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/token", dir);
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* Not root: commands run as sbxd's own user. */
    struct auth_readers me = {.switch_user = false};
    ck_assert_int_eq(auth_file_exposed(path, &me, why, sizeof(why)), 1);
    ck_assert_ptr_nonnull(strstr(why, "SBXD_TOKEN"));
    if (geteuid() != 0)
        return; /* the rest switches ids */
    struct auth_readers cmd = {.switch_user = true, .user_uid = 1000, .user_gid = 1000};
    struct auth_readers ranged = cmd;
    ranged.range_first = 100000;
    ranged.range_count = 1024;
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chmod(path, 0400), 0);
    ck_assert_int_eq(auth_file_exposed(path, &cmd, why, sizeof(why)), 0);
    ck_assert_int_eq(auth_file_exposed(path, &ranged, why, sizeof(why)), 0);
    ck_assert_int_eq(chmod(path, 0644), 0); /* a Secret volume's default */
    ck_assert_int_eq(auth_file_exposed(path, &cmd, why, sizeof(why)), 1);
    ck_assert_ptr_nonnull(strstr(why, "mode 0644"));
    ck_assert_int_eq(chmod(path, 0640), 0); /* the command group's */
    ck_assert_int_eq(chown(path, 0, 1000), 0);
    ck_assert_int_eq(auth_file_exposed(path, &cmd, why, sizeof(why)), 1);
    ck_assert_int_eq(chown(path, 0, 0), 0);
    ck_assert_int_eq(auth_file_exposed(path, &cmd, why, sizeof(why)), 0);
    ck_assert_int_eq(chmod(path, 0604), 0); /* others': a range uid's too */
    ck_assert_int_eq(auth_file_exposed(path, &ranged, why, sizeof(why)), 1);
    ck_assert_int_eq(chmod(dir, 0700), 0); /* unreachable: the directory stops them */
    ck_assert_int_eq(auth_file_exposed(path, &ranged, why, sizeof(why)), 0);
    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chmod(path, 0400), 0); /* a uid of the range owns it: it could chmod it */
    ck_assert_int_eq(chown(path, 100007, 0), 0);
    ck_assert_int_eq(auth_file_exposed(path, &cmd, why, sizeof(why)), 0);
    ck_assert_int_eq(auth_file_exposed(path, &ranged, why, sizeof(why)), 1);
    ck_assert_int_eq(chown(path, 1000, 1000), 0); /* the command user's */
    ck_assert_int_eq(auth_file_exposed(path, &cmd, why, sizeof(why)), 1);
    unlink(path);
    rmdir(dir);
}
END_TEST

Suite *auth_suite(void)
{
    Suite *s = suite_create("auth");
    TCase *tc = tcase_create("auth");
    tcase_add_test(tc, check_accepts_only_the_token);
    tcase_add_test(tc, load_from_the_environment_wipes_it);
    tcase_add_test(tc, load_from_a_file);
    tcase_add_test(tc, load_refuses_unusable_tokens);
    tcase_add_test(tc, token_file_exposure);
    suite_add_tcase(s, tc);
    return s;
}
