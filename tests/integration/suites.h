#ifndef SBXD_IT_SUITES_H
#define SBXD_IT_SUITES_H

#include <check.h>

Suite *execute_suite(void);
Suite *errors_suite(void);
Suite *lifecycle_suite(void);
Suite *isolation_suite(void);
Suite *files_suite(void);
Suite *edit_suite(void);
Suite *entries_suite(void);
Suite *archive_suite(void);
Suite *stream_suite(void);
Suite *processes_suite(void);
Suite *environment_suite(void);
Suite *contexts_suite(void);
Suite *sbx_suite(void);
Suite *faults_suite(void);
Suite *hardening_suite(void);
Suite *attacks_suite(void);
Suite *reset_suite(void);
Suite *mcp_suite(void);
Suite *web_suite(void);
Suite *usage_suite(void);
Suite *ports_suite(void);
Suite *search_suite(void);

#ifdef SBXD_SANITIZED
#define SANITIZED 1   /* sbxd and the tests are built with ASan and UBSan */
#define SLOW      3.0 /* sanitizer builds are slower: scale time bounds */
#else
#define SANITIZED 0
#define SLOW      1.0
#endif

#endif
