#include <stdlib.h>

#include "suites.h"

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    srunner_add_suite(sr, request_suite());
    srunner_add_suite(sr, text_suite());
    srunner_add_suite(sr, outbuf_suite());
    srunner_add_suite(sr, resolve_suite());
    srunner_add_suite(sr, multipart_suite());
    srunner_add_suite(sr, ring_suite());
    srunner_add_suite(sr, auth_suite());
    srunner_add_suite(sr, list_suite());
    srunner_add_suite(sr, contain_suite());
    srunner_add_suite(sr, walk_suite());
    srunner_add_suite(sr, job_suite());
    srunner_add_suite(sr, jupyter_suite());
    srunner_add_suite(sr, web_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
