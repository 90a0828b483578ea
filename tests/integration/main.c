#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "suites.h"

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    daemon_start(&g_sbxd, NULL, NULL);
    SRunner *sr = srunner_create(execute_suite());
    srunner_add_suite(sr, errors_suite());
    srunner_add_suite(sr, lifecycle_suite());
    srunner_add_suite(sr, isolation_suite());
    srunner_add_suite(sr, files_suite());
    srunner_add_suite(sr, edit_suite());
    srunner_add_suite(sr, entries_suite());
    srunner_add_suite(sr, search_suite());
    srunner_add_suite(sr, archive_suite());
    srunner_add_suite(sr, stream_suite());
    srunner_add_suite(sr, processes_suite());
    srunner_add_suite(sr, environment_suite());
    srunner_add_suite(sr, contexts_suite());
    srunner_add_suite(sr, sbx_suite());
    srunner_add_suite(sr, reset_suite());
    srunner_add_suite(sr, mcp_suite());
    /* tools/test runs the fault injection as a tier of its own (CK_RUN_SUITE=faults) and
     * leaves it out of the integration tier with SBXD_SKIP_FAULTS=1. */
    const char *skip = getenv("SBXD_SKIP_FAULTS");
    if (!skip || strcmp(skip, "1") != 0)
        srunner_add_suite(sr, faults_suite());
    srunner_add_suite(sr, hardening_suite());
    srunner_add_suite(sr, attacks_suite());
    srunner_add_suite(sr, web_suite());
    srunner_add_suite(sr, usage_suite());
    srunner_add_suite(sr, ports_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);

    /* The shared daemon served every test above: it must still stop cleanly, with exit 0
     * and (in sanitizer builds) no leak or error report. */
    bool clean = daemon_stop_clean(&g_sbxd, 15000);
    curl_global_cleanup();
    return failed || !clean ? EXIT_FAILURE : EXIT_SUCCESS;
}
