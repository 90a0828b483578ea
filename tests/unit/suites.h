#ifndef SBXD_TEST_SUITES_H
#define SBXD_TEST_SUITES_H

#include <check.h>
#include <stdbool.h>
#include <sys/types.h>

/* Running, not a zombie (a zombie waits for whoever reaps it: it runs no more). procs.c */
bool proc_running(pid_t pid);

Suite *config_suite(void);
Suite *request_suite(void);
Suite *text_suite(void);
Suite *outbuf_suite(void);
Suite *resolve_suite(void);
Suite *multipart_suite(void);
Suite *ring_suite(void);
Suite *auth_suite(void);
Suite *list_suite(void);
Suite *contain_suite(void);
Suite *walk_suite(void);
Suite *job_suite(void);
Suite *jupyter_suite(void);
Suite *web_suite(void);

#endif
